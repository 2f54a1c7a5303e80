#pragma once
// Everything training changes, in one object that travels inside the model
// token (nodes/model_token.hpp): the drafter, AdamW, the LR schedule, the
// stability guard, what guard policy rollback keeps, progress and the live
// quarantine set. Only the token's holder (drafter_step, accumulate,
// optimizer_step, in turn) can reach it. Snapshots for checkpoints and
// evaluation, and rollback snapshots, are taken from it and restored into it.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/quarantine.hpp"
#include "drafter/drafter.hpp"
#include "nodes/progress.hpp"
#include "nodes/run_context.hpp"
#include "train/optimizer.hpp"
#include "train/checkpoint.hpp"
#include "train/guard.hpp"
#include "train/rollback_keeper.hpp"
#include "train/schedule.hpp"

namespace dflow::nodes {

using train::RollbackSnapshot;

class TrainableState {
 public:
  // A fresh drafter (seeded by run.seed), or the one `resume` holds.
  TrainableState(const RunContext& run, const train::LoadedCheckpoint* resume);

  drafter::DFlashDrafter drafter{nullptr};   // [drafter device]
  std::unique_ptr<train::Optimizer> optimizer;  // the optimizer node's pick (RunContext::make_optimizer)
  train::Schedule schedule;
  train::StabilityGuard guard;
  train::RollbackKeeper rollback;  // policy rollback: the candidate and good snapshots, the steps since good
  Progress progress;
  data::SampleSet quarantined;  // live: grown by optimizer_step, read by drafter_step
  // The samples quarantined by the guard's current run of spikes (policy
  // quarantine), in step order: released if the run becomes its metric's new
  // level. Checkpointed, so a resumed run can still release them.
  std::vector<int64_t> quarantine_pending;
  // Clocks of the token's holders, for the records' timings.
  std::chrono::steady_clock::time_point last_step_end{};       // optimizer_step
  std::chrono::steady_clock::time_point last_allreduce_end{};  // accumulate

  // Named trainable parameters of the drafter (HF names), the optimizer's order.
  std::vector<std::pair<std::string, torch::Tensor>> parameters() const;
  std::vector<torch::Tensor> parameter_tensors() const;
  // Every tensor the drafter holds, trained or not: its parameters, the fixed
  // ones its kind derives from the target (DSpine's codes) and its buffers.
  // What every rank must hold as rank 0 does.
  std::vector<torch::Tensor> drafter_tensors() const;
  // CPU copies of everything a checkpoint holds. Ranks other than 0 never
  // write one: theirs carries only the step.
  train::CheckpointState snapshot(const RunContext& run) const;
  // Adds `ids` to the live set and (rank 0) appends them to quarantine.jsonl, fsynced.
  void quarantine(const RunContext& run, int64_t global_step, const std::string& reason,
                  const std::vector<int64_t>& ids);
  // After `verdict` on the step with `sample_ids`: a spike quarantined its
  // samples at once, but its verdict is final only when its run of spikes
  // ends. A run that lasts is the metric's new level (verdict.rebaselined):
  // its earlier steps were no spikes, and the samples they quarantined are
  // released (out of the live set; rank 0 appends the release to
  // quarantine.jsonl) and returned.
  std::vector<int64_t> settle_pending_quarantine(const RunContext& run, int64_t global_step,
                                                 const train::GuardVerdict& verdict,
                                                 const std::vector<int64_t>& sample_ids);

  // Parameters, optimizer and guard state now, on the drafter's device.
  RollbackSnapshot take_rollback_snapshot() const;
  // Parameters, optimizer and the guard's baseline back to the snapshot's. A
  // rollback is counted (the count itself is never rolled back); a halt that
  // saves the snapshot is not a rollback.
  void restore(const RollbackSnapshot& snapshot, bool count_as_rollback = true);

 private:
  void restore(const train::LoadedCheckpoint& checkpoint);
};

}  // namespace dflow::nodes
