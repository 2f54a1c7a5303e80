#pragma once
// Leftovers of checkpoint writers that were killed: temporary
// (`.step-N.tmp-PID`, `.best-step-N.tmp-PID`) and half-removed
// (`.step-N.del-PID`) directories. Never taken for checkpoints, but they take
// space until removed.
#include <filesystem>

namespace dflow::train {

// Removes those of other processes from checkpoints_dir (this process's own
// may be in the middle of a write); done before each checkpoint write and
// when a run starts.
void remove_stale_temporaries(const std::filesystem::path& checkpoints_dir);

}  // namespace dflow::train
