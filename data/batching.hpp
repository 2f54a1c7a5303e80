#pragma once
// Forming the batches of an epoch (their order is interleave.hpp's job); the
// policies of data/batching_policy.hpp call these.
#include <cstdint>
#include <span>
#include <vector>

#include "data/plan.hpp"

namespace dflow::data {

// The smallest bucket >= each sample's length. Throws DataError naming the
// first sample longer than the largest bucket.
std::vector<int> bucket_of_samples(std::span<const int32_t> lengths, std::span<const int> buckets);

// TokenBudget: each bucket's samples shuffled, then cut into batches of
// tokens_per_batch / bucket_length rows padded to the bucket length. Grouped
// by bucket, smallest first.
std::vector<PlannedBatch> token_budget_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                               uint64_t data_fingerprint);

// FixedBatch: all samples shuffled, then cut into batch_size rows padded to
// the longest row, in that shuffled order.
std::vector<PlannedBatch> fixed_size_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                             uint64_t data_fingerprint, int batch_size);

// Pack: all samples shuffled, then cut into windows of pack_window samples;
// within a window, longest first, each sample goes to the open row it fills
// best (best-fit decreasing, rows of max_length tokens). Rows of all windows
// are shuffled, then cut into batches of tokens_per_batch / max_length rows
// padded to the longest row of the batch. A sample is never split; one
// longer than max_length is refused naming it.
std::vector<PlannedBatch> packed_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                         uint64_t data_fingerprint, int pack_window);

}  // namespace dflow::data
