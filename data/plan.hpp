#pragma once
// The epoch plan: every batch of an epoch, in the order they run, built from
// the dataset index alone (lengths + fingerprint) before the epoch starts.
// A pure function of (seed, epoch, data fingerprint, options) — DESIGN
// invariant 6 — so a cursor into it is all that resume needs (invariant 7).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::data {

class Dataset;

class BatchingPolicy;  // data/batching_policy.hpp: how samples become batches

struct PlanOptions {
  uint64_t seed = 0;
  int epoch = 0;                    // 0-based
  std::vector<int> buckets;         // increasing bucket lengths in tokens; a sample goes to the smallest >= its length
  int64_t tokens_per_batch = 4096;  // padded-token budget of one batch (data.tokens_per_batch)
  int max_length = 0;               // tokens per packed row (data.max_length)
  // How samples become batches; null: token_budget_batching().
  std::shared_ptr<const BatchingPolicy> batching;
  int grad_accum = 1;               // micro-batches per rank per optimizer step
  int world_size = 1;               // data-parallel ranks
};

struct PlannedBatch {
  int epoch = 0;
  int64_t index_in_epoch = 0;  // position in plan order; PlanCursor::next_batch counts these
  int64_t step_in_epoch = 0;   // index_in_epoch / (world_size * grad_accum)
  int rank = 0;                // the rank that runs it
  int micro_in_step = 0;       // its place among that rank's micro-batches of the step
  int micros_in_step = 0;      // that rank's micro-batches in this step (fewer in a short last step)
  int bucket_index = 0;        // into PlanOptions::buckets
  int padded_length = 0;       // tokens per row after right padding
  std::vector<int64_t> sample_ids;  // global ids into the Dataset, row order (one per sample, packed or not)
  // Packed batches only: row r holds sample_ids[row_begin[r] .. row_begin[r + 1]),
  // laid out one after another from token 0 (rows() + 1 entries). Empty: one
  // sample per row.
  std::vector<int64_t> row_begin;
  int64_t real_tokens = 0;
  int64_t padded_tokens = 0;   // rows * padded_length

  bool packed() const { return !row_begin.empty(); }
  int64_t rows() const {
    return packed() ? static_cast<int64_t>(row_begin.size()) - 1 : static_cast<int64_t>(sample_ids.size());
  }
  int64_t num_samples() const { return static_cast<int64_t>(sample_ids.size()); }
  bool is_last_micro_of_step() const { return micro_in_step + 1 == micros_in_step; }
  double padding_efficiency() const;  // real_tokens / padded_tokens
};

// Where an epoch stands: the next batch (in plan order) to run.
struct PlanCursor {
  int epoch = 0;
  int64_t next_batch = 0;
  bool operator==(const PlanCursor&) const = default;
};

class EpochPlan {
 public:
  EpochPlan(PlanOptions options, uint64_t data_fingerprint, std::vector<PlannedBatch> batches);

  const PlanOptions& options() const { return options_; }
  uint64_t data_fingerprint() const { return data_fingerprint_; }
  int epoch() const { return options_.epoch; }

  std::span<const PlannedBatch> batches() const { return batches_; }  // plan order
  int64_t num_batches() const { return static_cast<int64_t>(batches_.size()); }
  int64_t batches_per_step() const { return int64_t{options_.world_size} * options_.grad_accum; }
  // ceil(num_batches / batches_per_step); the last step may be short.
  int64_t steps_per_epoch() const;
  int64_t num_samples() const;

  // The batches `rank` runs, in order; from a cursor: only those not yet run.
  std::vector<const PlannedBatch*> batches_for_rank(int rank) const;
  std::vector<const PlannedBatch*> batches_for_rank(int rank, const PlanCursor& from) const;
  // How many micro-batches `rank` runs in `step` (0 is possible in a short last step).
  int micros_in_step(int64_t step, int rank) const;

  // The batches from the cursor on; throws DataError for a cursor of another
  // epoch or beyond the end.
  std::span<const PlannedBatch> remaining(const PlanCursor& cursor) const;
  PlanCursor begin() const { return PlanCursor{options_.epoch, 0}; }
  PlanCursor cursor_at_step(int64_t step) const;  // before the step's first batch
  PlanCursor end() const { return PlanCursor{options_.epoch, num_batches()}; }

  int64_t real_tokens() const;
  int64_t padded_tokens() const;
  double padding_efficiency() const;  // real / padded over the epoch
  int64_t max_padded_tokens() const;  // of any batch
  std::vector<int64_t> batches_per_bucket() const;
  // "[data] epoch 2 plan: 120 batches, 30 steps, ..." for the log.
  std::string summary() const;

 private:
  void check_rank(int rank) const;

  PlanOptions options_;
  uint64_t data_fingerprint_ = 0;
  std::vector<PlannedBatch> batches_;
};

// Throws DataError for invalid options (naming the data.* key), an empty
// dataset, or a sample longer than the largest bucket (naming its id).
EpochPlan build_epoch_plan(std::span<const int32_t> lengths, uint64_t data_fingerprint, const PlanOptions& options);
EpochPlan build_epoch_plan(const Dataset& dataset, const PlanOptions& options);

}  // namespace dflow::data
