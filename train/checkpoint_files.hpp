#pragma once
// The unsynchronised checkpoint writes behind CheckpointWriter
// (train/checkpoint_writer.hpp). Within a run, write through the writer: these
// assume no other write into checkpoints_dir is in progress.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "train/checkpoint.hpp"

namespace dflow::train {

// Writes `checkpoints_dir/step-<N>` atomically, points `latest` at it and
// prunes beyond `keep`. Returns the checkpoint's directory.
fs::path write_step_checkpoint(const fs::path& checkpoints_dir, const CheckpointState& state, int keep,
                               const std::function<void()>& mid_write);

// Writes `checkpoints_dir/best-step-<N>` atomically with `eval` in its
// manifest, points `best` at it (atomically, like `latest`) and removes the
// previous best directory.
fs::path write_best_checkpoint(const fs::path& checkpoints_dir, const CheckpointState& state,
                               const nlohmann::json& eval);

}  // namespace dflow::train
