#include "data/batching.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "data/data_error.hpp"
#include "data/seeded_rng.hpp"

namespace dflow::data {
namespace {

// Seed streams of the plan; changing one changes every plan.
constexpr uint64_t kBucketShuffleStream = 0x100;  // + bucket index
constexpr uint64_t kFixedShuffleStream = 0x200;

PlannedBatch make_batch(int epoch, int bucket_index, int padded_length, std::vector<int64_t> sample_ids,
                        std::span<const int32_t> lengths) {
  PlannedBatch batch;
  batch.epoch = epoch;
  batch.bucket_index = bucket_index;
  batch.padded_length = padded_length;
  for (const int64_t id : sample_ids) batch.real_tokens += lengths[static_cast<size_t>(id)];
  batch.padded_tokens = static_cast<int64_t>(sample_ids.size()) * padded_length;
  batch.sample_ids = std::move(sample_ids);
  return batch;
}

}  // namespace

std::vector<int> bucket_of_samples(std::span<const int32_t> lengths, std::span<const int> buckets) {
  std::vector<int> bucket_of(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto found = std::lower_bound(buckets.begin(), buckets.end(), lengths[i]);
    if (found == buckets.end()) {
      throw DataError(fmt::format("sample {} has {} tokens, more than the largest bucket ({}); add a bucket of at "
                                  "least {} to data.buckets, or re-run dflow prepare with max_length <= {}",
                                  i, lengths[i], buckets.back(), lengths[i], buckets.back()));
    }
    bucket_of[i] = static_cast<int>(found - buckets.begin());
  }
  return bucket_of;
}

std::vector<PlannedBatch> token_budget_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                               uint64_t data_fingerprint) {
  const auto bucket_of = bucket_of_samples(lengths, options.buckets);
  std::vector<std::vector<int64_t>> samples_in_bucket(options.buckets.size());
  for (size_t i = 0; i < lengths.size(); ++i) samples_in_bucket[bucket_of[i]].push_back(static_cast<int64_t>(i));

  std::vector<PlannedBatch> batches;
  for (size_t b = 0; b < options.buckets.size(); ++b) {
    auto& samples = samples_in_bucket[b];
    SeededRng rng(derive_seed(options.seed, options.epoch, data_fingerprint, kBucketShuffleStream + b));
    rng.shuffle(std::span<int64_t>(samples));
    const int bucket_length = options.buckets[b];
    const auto rows_per_batch = static_cast<size_t>(options.tokens_per_batch / bucket_length);
    for (size_t first = 0; first < samples.size(); first += rows_per_batch) {
      const size_t last = std::min(samples.size(), first + rows_per_batch);
      batches.push_back(make_batch(options.epoch, static_cast<int>(b), bucket_length,
                                   {samples.begin() + static_cast<ptrdiff_t>(first),
                                    samples.begin() + static_cast<ptrdiff_t>(last)},
                                   lengths));
    }
  }
  return batches;
}

std::vector<PlannedBatch> fixed_size_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                             uint64_t data_fingerprint) {
  const auto bucket_of = bucket_of_samples(lengths, options.buckets);  // refuses over-long samples
  std::vector<int64_t> samples(lengths.size());
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<int64_t>(i);
  SeededRng rng(derive_seed(options.seed, options.epoch, data_fingerprint, kFixedShuffleStream));
  rng.shuffle(std::span<int64_t>(samples));

  std::vector<PlannedBatch> batches;
  const auto rows_per_batch = static_cast<size_t>(options.batch_size);
  for (size_t first = 0; first < samples.size(); first += rows_per_batch) {
    const size_t last = std::min(samples.size(), first + rows_per_batch);
    std::vector<int64_t> ids(samples.begin() + static_cast<ptrdiff_t>(first),
                             samples.begin() + static_cast<ptrdiff_t>(last));
    int32_t longest = 0;
    int bucket = 0;
    for (const int64_t id : ids) {
      longest = std::max(longest, lengths[static_cast<size_t>(id)]);
      bucket = std::max(bucket, bucket_of[static_cast<size_t>(id)]);
    }
    batches.push_back(make_batch(options.epoch, bucket, longest, std::move(ids), lengths));
  }
  return batches;
}

}  // namespace dflow::data
