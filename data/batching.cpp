#include "data/batching.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "data/data_error.hpp"
#include "data/seeded_rng.hpp"

namespace dflow::data {
namespace {

// Seed streams of the plan; changing one changes every plan.
constexpr uint64_t kBucketShuffleStream = 0x100;  // + bucket index
constexpr uint64_t kFixedShuffleStream = 0x200;
constexpr uint64_t kPackShuffleStream = 0x400;
constexpr uint64_t kPackRowShuffleStream = 0x401;

// Best-fit decreasing over one window of samples: rows of at most
// row_capacity tokens, each a list of sample ids in placement order.
void pack_one_window(std::span<int64_t> window, std::span<const int32_t> lengths, int row_capacity,
                 std::vector<std::vector<int64_t>>& rows) {
  // Stable: equal lengths keep their shuffled order, so the result is a pure function of the shuffle.
  std::stable_sort(window.begin(), window.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  std::multimap<int, size_t> room_of_open_rows;  // tokens left -> row; equal rooms in opening order
  for (const int64_t id : window) {
    const int length = lengths[static_cast<size_t>(id)];
    auto best = room_of_open_rows.lower_bound(length);  // the fullest row that still fits
    if (best == room_of_open_rows.end()) {
      rows.push_back({id});
      if (row_capacity - length > 0) room_of_open_rows.emplace(row_capacity - length, rows.size() - 1);
      continue;
    }
    const auto [room, row] = *best;
    room_of_open_rows.erase(best);
    rows[row].push_back(id);
    if (room - length > 0) room_of_open_rows.emplace(room - length, row);
  }
}

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

std::vector<PlannedBatch> packed_batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                         uint64_t data_fingerprint, int pack_window) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > options.max_length) {
      throw DataError(fmt::format("sample {} has {} tokens, more than data.max_length ({}), the length of a packed "
                                  "row; raise data.max_length or re-run dflow prepare with max_length <= {}",
                                  i, lengths[i], options.max_length, options.max_length));
    }
  }
  std::vector<int64_t> samples(lengths.size());
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<int64_t>(i);
  SeededRng rng(derive_seed(options.seed, options.epoch, data_fingerprint, kPackShuffleStream));
  rng.shuffle(std::span<int64_t>(samples));

  std::vector<std::vector<int64_t>> rows;
  const auto window = static_cast<size_t>(std::max(1, pack_window));
  for (size_t first = 0; first < samples.size(); first += window) {
    const size_t count = std::min(window, samples.size() - first);
    pack_one_window(std::span<int64_t>(samples).subspan(first, count), lengths, options.max_length, rows);
  }
  // Rows of one window run from long samples to short ones: shuffle rows so that batches mix them.
  std::vector<int64_t> row_order(rows.size());
  for (size_t r = 0; r < row_order.size(); ++r) row_order[r] = static_cast<int64_t>(r);
  SeededRng row_rng(derive_seed(options.seed, options.epoch, data_fingerprint, kPackRowShuffleStream));
  row_rng.shuffle(std::span<int64_t>(row_order));

  const auto rows_per_batch = static_cast<size_t>(std::max<int64_t>(1, options.tokens_per_batch / options.max_length));
  std::vector<PlannedBatch> batches;
  for (size_t first = 0; first < row_order.size(); first += rows_per_batch) {
    const size_t last = std::min(row_order.size(), first + rows_per_batch);
    PlannedBatch batch;
    batch.epoch = options.epoch;
    batch.row_begin.push_back(0);
    int64_t longest_row = 0;
    for (size_t r = first; r < last; ++r) {
      int64_t row_tokens = 0;
      for (const int64_t id : rows[static_cast<size_t>(row_order[r])]) {
        batch.sample_ids.push_back(id);
        row_tokens += lengths[static_cast<size_t>(id)];
      }
      batch.row_begin.push_back(static_cast<int64_t>(batch.sample_ids.size()));
      batch.real_tokens += row_tokens;
      longest_row = std::max(longest_row, row_tokens);
    }
    batch.padded_length = static_cast<int>(longest_row);
    // The bucket of the padded row length, so per-bucket batch counts stay meaningful.
    const auto bucket = std::lower_bound(options.buckets.begin(), options.buckets.end(), batch.padded_length);
    batch.bucket_index = static_cast<int>(std::min<ptrdiff_t>(bucket - options.buckets.begin(),
                                                              static_cast<ptrdiff_t>(options.buckets.size()) - 1));
    batch.padded_tokens = batch.rows() * batch.padded_length;
    batches.push_back(std::move(batch));
  }
  return batches;
}

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
                                             uint64_t data_fingerprint, int batch_size) {
  const auto bucket_of = bucket_of_samples(lengths, options.buckets);  // refuses over-long samples
  std::vector<int64_t> samples(lengths.size());
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<int64_t>(i);
  SeededRng rng(derive_seed(options.seed, options.epoch, data_fingerprint, kFixedShuffleStream));
  rng.shuffle(std::span<int64_t>(samples));

  std::vector<PlannedBatch> batches;
  const auto rows_per_batch = static_cast<size_t>(batch_size);
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
