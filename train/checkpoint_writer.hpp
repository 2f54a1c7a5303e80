#pragma once
// The run's one checkpoint writer. Every write of a checkpoint directory
// (`step-N/`, `best-step-N/`), every move of `latest` and `best` and every
// prune goes through it, one at a time: the background checkpoint node, the
// eval node's best snapshot and the guard's halt share one temporary name per
// step and prune the same directory, so two of them at once could delete each
// other's files. A halt's checkpoint is final: once written, later writes
// (a snapshot still queued for the background writer) are declined, so the
// state the halt chose stays `latest`.
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "train/checkpoint.hpp"

namespace dflow::train {

class CheckpointWriter {
 public:
  CheckpointWriter(fs::path checkpoints_dir, int keep);

  // `step-<N>` atomically, `latest` to it, then prunes beyond `keep`. Waits
  // for a write in progress. nullopt when a final checkpoint was written
  // before (the run is halting). Throws naming the checkpoint when the write
  // fails; what was saved before stays as it was.
  // `mid_write` (optional) runs after the first file is written: fault
  // injection uses it to stretch the window in which a crash hits a
  // half-written checkpoint.
  std::optional<fs::path> write(const CheckpointState& state, const std::function<void()>& mid_write = {});

  // `best-step-<N>` with `eval` (mean tau, prompts, ...) in its manifest,
  // `best` to it, and removes the previous best directory. Never pruned by
  // `keep`, never taken for `latest`. nullopt after a final checkpoint.
  std::optional<fs::path> write_best(const CheckpointState& state, const nlohmann::json& eval);

  // The halt path: like write(), and the last write of the run.
  fs::path write_final(const CheckpointState& state);

  const fs::path& directory() const { return checkpoints_dir_; }

 private:
  const fs::path checkpoints_dir_;
  const int keep_;
  std::mutex mutex_;
  bool final_written_ = false;  // guarded by mutex_
};

}  // namespace dflow::train
