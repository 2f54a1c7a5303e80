#pragma once
// Before training: whether drafter_step's micro-batches fit the drafter
// device's memory, from the memory model of drafter/drafter_memory.hpp, so
// that a configuration that cannot fit says so at start, with the largest
// anchors_per_sequence that would, instead of running out of memory hours in.
//
// The shapes checked: for each length bucket up to data.max_length, a
// micro-batch of tokens_per_batch / bucket rows of that length, each with
// min(anchors_per_sequence, bucket - 1) anchors (the most a row can have).
// What the run holds on the drafter's device beside the step is taken from
// the memory first (BesideTheStep): when target_forward runs on that device,
// the target's forward over its largest micro-batch (target/target_memory.hpp);
// the feature batches the edges between the feature source and drafter_step
// can hold (the sources emit them on the drafter's device); eval.tau's copy
// of the drafter; guard policy rollback's snapshots.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/objective.hpp"
#include "graph/registry.hpp"
#include "target/hf_config.hpp"

namespace dflow::nodes {

class RunContext;

// The target's forward working memory at its largest micro-batch (the
// buckets as the drafter's fit checks them; features: the hidden states it
// returns). Its resident weights are not included.
struct TargetForwardFit {
  double bytes = 0;
  int64_t rows = 0, length = 0;
};
TargetForwardFit largest_target_forward(const target::HFConfig& target, const config::DataConfig& data,
                                        int64_t features, int64_t element_bytes, bool cuda);

// What the run holds on the drafter's device beside drafter_step's own
// micro-batch, in its steady state.
struct BesideTheStep {
  TargetForwardFit target_forward;  // target replicas on the drafter's device (0 bytes: none)
  // FeatureBatches waiting on the edges that carry them (each edge's
  // capacity, per consumer replica), or being made under an edge's credit,
  // at the largest micro-batch: features and the teacher's states.
  int64_t queued_batches = 0;
  double queued_bytes = 0;
  double eval_drafter_bytes = 0;  // a node's copy of the drafter (eval.tau, rank 0): weights and drafting's context
  double rollback_bytes = 0;      // guard policy rollback: candidate and good snapshots of parameters and optimizer
  double total_bytes() const { return target_forward.bytes + queued_bytes + eval_drafter_bytes + rollback_bytes; }
};

// The batches, copies and snapshots of BesideTheStep (its target_forward
// left to the caller, who knows the loaded replicas), from the declared
// pipeline: the edges' types and capacities (graph::describe), the nodes'
// RunHooks::holds_drafter_copy, the guard's policy. `feature_layers` and
// `teacher`: what each FeatureBatch carries; `rank`: copies kept on rank 0
// only are not this rank's.
BesideTheStep beside_the_step(const config::Config& config, const graph::NodeRegistry& kinds,
                              const drafter::DrafterSpec& spec, torch::Dtype dtype, bool teacher, int rank);

struct MemoryFit {
  int64_t max_length = 0;
  drafter::DrafterMemoryShape largest_batch;  // the micro-batch that needs the most
  double needed_bytes = 0, available_bytes = 0;
  bool fits = false;
  // At max_length rows: bytes per anchor kept for backward, without and with recomputation.
  double per_anchor_bytes = 0, per_anchor_recomputed_bytes = 0;
  int64_t largest_fitting_anchors = 0;        // with the configured recompute choice
  int64_t largest_fitting_anchors_other = 0;  // with the other one
  BesideTheStep beside;  // taken from the memory before the drafter's fit
  std::string describe(const std::string& node, const std::string& device) const;
};

// The micro-batch checked for rows of `length` tokens: tokens_per_batch /
// length rows, each with min(anchors_per_sequence, length - 1) anchors.
// The teacher's states and the loss's buffers as the loss and the drafter
// kind need them (DrafterKind::needs_teacher, loss_memory).
drafter::DrafterMemoryShape micro_batch_shape(const drafter::DrafterSpec& spec, const config::DataConfig& data,
                                            int64_t length, int64_t anchors_per_sequence, torch::Dtype dtype,
                                            const drafter::ObjectiveOptions& objective, bool recompute);
// The lengths checked: each bucket below max_length, and max_length.
std::vector<int64_t> checked_lengths(const config::DataConfig& data);

// The step's fit in what `beside` leaves of available_bytes.
MemoryFit check_memory_fit(const drafter::DrafterSpec& spec, const config::DataConfig& data,
                           int64_t anchors_per_sequence, torch::Dtype dtype, const drafter::ObjectiveOptions& objective,
                           double available_bytes, const BesideTheStep& beside = {});

// The fit of a run at start (this rank's), as log_memory_fit logs it.
MemoryFit run_memory_fit(const RunContext& run, const drafter::ObjectiveOptions& objective, double available_bytes);

// Logs describe() at start: info when the run fits the drafter device's
// available memory (train::available_memory_bytes), a warning when not. A
// target replica on that device is loaded already (its weights are out of
// the available memory); its forward's working memory is taken from it, as
// is the rest of BesideTheStep.
void log_memory_fit(const RunContext& run, const drafter::ObjectiveOptions& objective, const std::string& node);

}  // namespace dflow::nodes
