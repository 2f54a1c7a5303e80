#pragma once
// What guard policy rollback keeps from step to step, without the graph: a
// candidate snapshot (the state after some step, not yet vouched for), the
// good snapshot (a candidate whose next step, computed on exactly its
// weights, was unremarkable) and the steps taken since the good one with
// their samples (what a rollback undoes and excludes). The trainable state
// owns one, so it travels with the model token; checkpoints save it, so a
// resumed run rolls back as the uninterrupted one would. Under any other
// policy it keeps nothing.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "train/checkpoint.hpp"
#include "train/guard.hpp"

namespace dflow::train {

// Parameters, optimizer and guard state after some step, kept on the
// drafter's device (about three times the parameters' size).
struct RollbackSnapshot {
  int64_t completed_steps = 0;            // the state after this many steps
  std::vector<torch::Tensor> parameters;  // the drafter's trainable parameters, in the optimizer's order
  std::map<std::string, torch::Tensor> optimizer_state;
  int64_t optimizer_steps = 0;
  nlohmann::json guard_state;
};

// What a rollback undid: its record's evidence.
struct RollbackUndo {
  int64_t to_step = 0;                       // back to the state after this many steps
  std::vector<int64_t> undone_steps;         // 1-based, oldest first
  std::vector<int64_t> excluded_sample_ids;  // the samples of those steps, in step order
};

class RollbackKeeper {
 public:
  explicit RollbackKeeper(const config::GuardConfig& guard);

  bool keeping() const { return keeping_; }

  // Before the first step a keeper sees: whether the state after
  // `completed_steps` is due as the first candidate. Never after restore()
  // found a kept state (that one already holds what the run had kept).
  bool candidate_due_at_start(int64_t completed_steps);
  // After a step: whether the state after `completed_steps` is due as a
  // candidate. Only a state the guard trusts: an applied step outside a run
  // of high losses (`cliff_run`).
  bool candidate_due_after(int64_t completed_steps, const GuardVerdict& verdict, int cliff_run) const;
  void keep_candidate(RollbackSnapshot snapshot);

  // The verdict on step `step_index` (0-based). The candidate after
  // `step_index` steps is what that step computed on: it becomes the good
  // snapshot when the step is unremarkable, and is dropped otherwise (the
  // update before it may have done damage that shows only now). Any other
  // candidate is dropped.
  void settle(int64_t step_index, const GuardVerdict& verdict);
  // Step `step_index` was taken (applied or not) on `sample_ids`.
  void step_taken(int64_t step_index, const std::vector<int64_t>& sample_ids);

  const RollbackSnapshot* good() const { return good_ ? &*good_ : nullptr; }
  const RollbackSnapshot* candidate() const { return candidate_ ? &*candidate_ : nullptr; }

  // Back to good(), which must exist: what the steps since it were (undone,
  // their samples to be excluded). Forgets them and the candidate; the good
  // snapshot stays for the next rollback. The caller restores good().
  RollbackUndo roll_back();

  // Checkpointing. state(): null when keeping nothing; tensors() are CPU
  // copies named "candidate/..." and "good/...". restore() with a null state
  // (a checkpoint written without rollback, or by an older dflow) keeps
  // nothing; kept tensors go to `device`.
  nlohmann::json state() const;
  NamedTensors tensors() const;
  void restore(const nlohmann::json& state, const std::map<std::string, torch::Tensor>& tensors,
               const torch::Device& device);

 private:
  const bool keeping_;      // guard.policy == rollback
  const int snapshot_every_;
  bool started_ = false;    // a candidate was considered at start, or restored
  std::optional<RollbackSnapshot> candidate_, good_;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> steps_since_good_;  // (step index, its samples)
};

}  // namespace dflow::train
