#pragma once
// metrics.jsonl when a run resumes: what the interrupted run recorded past
// the checkpoint goes, so that the resumed run writes each later step once
// (a reader that does not take the last record per step reads it right).
#include <cstdint>
#include <filesystem>

namespace dflow::nodes {

// Keeps the complete records of `metrics` whose global_step is at most
// `checkpoint_step` (and those without one), wherever they are in the file:
// an evaluation may be written after later steps' records. Drops a partial
// last line (a run killed while writing it). With `restore_record`, appends
// the checkpoint step's own record from the checkpoint's state.json when the
// file lacks it (killed between saving the checkpoint and writing the record).
// Atomic: a synced copy is renamed over the file, and only when something
// changes. Throws naming the file when it cannot be rewritten.
void trim_metrics_to_checkpoint(const std::filesystem::path& metrics, const std::filesystem::path& checkpoint,
                                 int64_t checkpoint_step, bool restore_record);

}  // namespace dflow::nodes
