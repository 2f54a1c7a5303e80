#pragma once
// How an epoch's samples become batches. A batching node of the pipeline
// picks its policy from its own params (nodes/pad_bucket.cpp); the epoch plan
// asks the policy for the batches and assigns them to ranks and steps
// (data/plan.hpp). A new way to batch is one subclass here plus the node kind
// that picks it.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/plan.hpp"

namespace dflow::data {

class BatchingPolicy {
 public:
  virtual ~BatchingPolicy() = default;
  // "token_budget", "fixed_batch", "pack": named in the plan's summary.
  virtual std::string name() const = 0;
  // The params that change its batches, as YAML ("{pack_window: 4096}"; ""
  // for none): with the node's type, what a resume must keep.
  virtual std::string params_text() const { return ""; }
  // Throws DataError when the plan's options cannot work with it, naming the key.
  virtual void check(const PlanOptions& options) const = 0;
  // The epoch's batches in the order they run (ranks and steps are assigned
  // by the plan). A pure function of (lengths, options, fingerprint).
  virtual std::vector<PlannedBatch> batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                            uint64_t data_fingerprint) const = 0;
  // True when every sample of a batch comes from one length bucket (the
  // batch's bucket_index): per-bucket losses are then the batch's.
  virtual bool one_bucket_per_batch() const { return false; }
};

// Length buckets; rows x bucket length <= data.tokens_per_batch, buckets interleaved.
std::shared_ptr<const BatchingPolicy> token_budget_batching();
// `batch_size` rows padded to the longest, in shuffled order (how most peers batch).
std::shared_ptr<const BatchingPolicy> fixed_size_batching(int batch_size);
// Whole samples packed into rows of data.max_length, best-fit decreasing over `pack_window` samples.
std::shared_ptr<const BatchingPolicy> packed_batching(int pack_window);

}  // namespace dflow::data
