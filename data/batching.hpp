#pragma once
// Forming the batches of an epoch (their order is interleave.hpp's job).
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
                                             uint64_t data_fingerprint);

}  // namespace dflow::data
