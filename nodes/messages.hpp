#pragma once
// The payloads that travel on the training graph's edges, one struct per port
// type name. Port type names (the strings in each node's registration) are
// given next to each struct.
#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/collate.hpp"
#include "data/plan.hpp"
#include "train/checkpoint.hpp"

namespace dflow::nodes {

// Where a micro-batch sits in the run (invariant 5: progress is unambiguous).
struct StepPosition {
  int epoch = 0;                 // 0-based
  int64_t step_in_epoch = 0;     // 0-based
  int64_t steps_per_epoch = 0;   // exact, from the plan
  int64_t global_step = 0;       // 0-based optimizer step this micro-batch belongs to
  int micro_in_step = 0;
  int micros_in_step = 0;
  bool last_micro() const { return micro_in_step + 1 == micros_in_step; }
};

// "LoadedBatch": a planned batch with its samples read from the shards.
struct LoadedBatch {
  data::PlannedBatch plan;
  StepPosition position;
  data::CollatedBatch host;  // right-padded to plan.padded_length
  int64_t excluded_rows = 0;  // planned rows dropped as quarantined
};

// "PaddedBatch": tensors ready for a target worker.
struct PaddedBatch {
  data::PlannedBatch plan;
  StepPosition position;
  torch::Tensor input_ids;  // [B, S] int64, CPU (pinned when a target is on CUDA)
  torch::Tensor loss_mask;  // [B, S] uint8
  torch::Tensor lengths;    // [B] int64
  int64_t excluded_rows = 0;  // planned rows dropped as quarantined (by the loader)
};

// "FeatureBatch": the target's fused context features for one micro-batch.
struct FeatureBatch {
  PaddedBatch batch;
  torch::Tensor features;  // [B, S, n*H] on the drafter's device
  int worker = 0;          // target replica that computed it
};

// Loss and accuracy as sums of numerators and denominators, so that
// micro-batches (and ranks) add up exactly.
struct LossSums {
  double weighted_ce_sum = 0;
  double weight_sum = 0;
  std::vector<double> correct_per_position;  // per block slot k
  std::vector<double> count_per_position;
  int64_t anchors = 0;
  int64_t real_tokens = 0;
  int64_t padded_tokens = 0;
  int64_t micro_batches = 0;
  std::vector<int64_t> batches_per_bucket;
  // Per bucket index (token_budget batching): the bucket's share of the
  // step's loss numerator and denominator, and its real tokens.
  std::vector<double> bucket_ce_sum;
  std::vector<double> bucket_weight_sum;
  std::vector<int64_t> bucket_real_tokens;
  std::vector<int64_t> sample_ids;       // trained on (quarantined rows already dropped)
  std::vector<int64_t> sample_lengths;
  int64_t excluded_samples = 0;          // planned rows dropped because they are quarantined

  void add(const LossSums& other);
};

// "MicroStats": one micro-batch's forward/backward done (gradients accumulated
// in the drafter). Carries the model token: its holder owns the parameters.
struct MicroStats {
  StepPosition position;
  LossSums sums;
};

// "StepStats": every micro-batch of one optimizer step, ready for the update.
// With several ranks the sums are already all-reduced (the global batch).
struct StepStats {
  StepPosition position;
  LossSums sums;
  std::vector<double> rank_busy_s;  // per rank: its previous all-reduce to this one (empty with one rank)
  double allreduce_s = 0;           // this rank's time in the step's all-reduces
};

// "StepRecord": exactly one optimizer step (invariant 4).
struct StepRecord {
  nlohmann::json record;
};

// "Snapshot": the state after step k, before step k+1 (invariant 1).
struct Snapshot {
  train::CheckpointState state;
};

}  // namespace dflow::nodes
