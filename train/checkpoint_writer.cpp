#include "train/checkpoint_writer.hpp"

#include "train/checkpoint_files.hpp"

namespace dflow::train {

CheckpointWriter::CheckpointWriter(fs::path checkpoints_dir, int keep)
    : checkpoints_dir_(std::move(checkpoints_dir)), keep_(keep) {}

std::optional<fs::path> CheckpointWriter::write(const CheckpointState& state, const std::function<void()>& mid_write) {
  std::lock_guard lock(mutex_);
  if (final_written_) return std::nullopt;
  return write_step_checkpoint(checkpoints_dir_, state, keep_, mid_write);
}

std::optional<fs::path> CheckpointWriter::write_best(const CheckpointState& state, const nlohmann::json& eval) {
  std::lock_guard lock(mutex_);
  if (final_written_) return std::nullopt;
  return write_best_checkpoint(checkpoints_dir_, state, eval);
}

fs::path CheckpointWriter::write_final(const CheckpointState& state) {
  std::lock_guard lock(mutex_);
  final_written_ = true;  // even if it fails: nothing after the halt may move `latest`
  return write_step_checkpoint(checkpoints_dir_, state, keep_, {});
}

}  // namespace dflow::train
