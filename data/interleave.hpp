#pragma once
// The order of an epoch's batches. Each bucket's batches are spread evenly
// over the epoch (stratified: batch k of n in a bucket lands at a random point
// of the k-th n-th of the epoch), so long-sequence batches never run as a
// block and every stretch of the epoch sees the same mix of lengths — steadier
// step times and memory than a plain shuffle, which can clump a rare bucket.
#include <cstdint>
#include <span>
#include <vector>

#include "data/plan.hpp"

namespace dflow::data {

// Returns the plan order as indices into `batches`. A pure function of the
// batches' buckets and the seed.
std::vector<size_t> interleave_buckets(std::span<const PlannedBatch> batches, uint64_t seed);

}  // namespace dflow::data
