#pragma once
// The payloads that travel on the training graph's edges, one struct per port
// type name (given next to each struct).
#include <chrono>
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "data/plan.hpp"
#include "target/documents.hpp"
#include "nodes/model_token.hpp"
#include "nodes/progress.hpp"
#include "nodes/step_record.hpp"
#include "nodes/step_totals.hpp"
#include "train/checkpoint.hpp"

namespace dflow::nodes {

// "LoadedBatch": a planned batch of this rank, its quarantined samples dropped.
struct LoadedBatch {
  data::PlannedBatch plan;
  StepPosition position;
  int64_t excluded_samples = 0;  // planned samples dropped as quarantined (not rows: a packed row holds several)
};

// "PaddedBatch": tensors ready for a target worker, collated once from the
// memory-mapped shards.
struct PaddedBatch {
  data::PlannedBatch plan;
  StepPosition position;
  torch::Tensor input_ids;  // [B, S] int64, CPU (pinned when a target is on CUDA)
  torch::Tensor loss_mask;  // [B, S] uint8
  torch::Tensor lengths;    // [B] int64: real tokens per row
  int64_t excluded_samples = 0;  // planned samples dropped as quarantined (by the loader)
  // Packed batches (pad_bucket.pack) only, else undefined: several samples per row.
  torch::Tensor position_ids;  // [B, S] int64: position within the token's sample
  torch::Tensor document_ids;  // [B, S] int32: the token's sample within its row (padding: one more)
  // Packed: the plan the rows were collated from, once samples left `plan`
  // since (nodes/exclude_samples.hpp: their documents stay in the rows,
  // without a loss); unset while the rows hold exactly the plan's samples.
  // The rows' documents, and the loss's per-sample figures, are its samples.
  std::optional<data::PlannedBatch> collated;
  const data::PlannedBatch& collated_plan() const { return collated ? *collated : plan; }
  bool packed() const { return document_ids.defined(); }
  target::PackedDocuments documents() const { return {position_ids, document_ids}; }
};

// "FeatureBatch": the target's fused context features for one micro-batch.
struct FeatureBatch {
  PaddedBatch batch;
  torch::Tensor features;  // [B, S, n*H] on the drafter's device
  int worker = 0;          // target replica that computed it
  // [B, S, H] on the drafter's device: the target's last hidden state after
  // its final norm (drafter::TeacherStates), set exactly when the run needs it
  // (RunContext::needs_teacher: the kl objective); undefined otherwise.
  torch::Tensor teacher_hidden;
};

// "MicroStats": one micro-batch's forward/backward done (gradients accumulated
// in the drafter). Carries the model token: its holder owns the parameters.
struct MicroStats {
  StepPosition position;
  StepTotals totals;
  ModelToken token;
};

// "StepStats": every micro-batch of one optimizer step, ready for the update,
// with the model token. With several ranks the totals are already all-reduced.
struct StepStats {
  StepPosition position;
  StepTotals totals;
  std::vector<double> rank_busy_s;  // per rank: its previous all-reduce to this one (empty with one rank)
  double allreduce_s = 0;           // this rank's time in the step's all-reduces
  ModelToken token;
};

// "StepRecord": exactly one optimizer step (invariant 4); nodes/step_record.hpp.

// "Snapshot": the state after step k, before step k+1 (invariant 1).
struct Snapshot {
  train::CheckpointState state;
  // When it was taken: a consumer off the training loop reports how long it waited.
  std::chrono::steady_clock::time_point taken_at = std::chrono::steady_clock::now();
};

}  // namespace dflow::nodes
