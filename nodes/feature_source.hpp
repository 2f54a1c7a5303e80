#pragma once
// What the feature sources share (target_forward, features.cached, and
// `dflow cache-features`): collating a planned batch, the target's fused
// features of a padded batch, and where each sample of a batch lies.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "data/feature_cache.hpp"
#include "target/target.hpp"
#include "nodes/messages.hpp"

namespace dflow::nodes {

class RunContext;

// A planned batch collated from the memory-mapped shards into padded tensors
// (pinned host memory with `pin`): what pad_bucket emits.
PaddedBatch collate_padded(const RunContext& run, const data::PlannedBatch& plan, const StepPosition& position,
                           int64_t excluded_samples, bool pin);

// The target's fused features of `batch` ([B, S, n*H]) on its device and
// in its dtype (what a cache stores); an empty batch gives [0, S, n*H].
// With `last_layer` (default: run.needs_teacher()) the same forward also
// gives the target's last hidden state after its final norm (dflow layer
// N - 1), appended: [B, S, (n+1)*H], as a cache with the last layer stores it.
torch::Tensor target_features(const RunContext& run, const target::TargetModel& target, const PaddedBatch& batch);
torch::Tensor target_features(const RunContext& run, const target::TargetModel& target, const PaddedBatch& batch,
                              bool last_layer);
// On the drafter's device in its dtype: what the drafter reads.
torch::Tensor for_drafter(const RunContext& run, const torch::Tensor& features);

// The drafter's FeatureBatch from rows [B, S, W] that hold the n feature
// layers and, when W is (n+1)*H, the last layer after them: the features on
// the drafter's device in its dtype, and, when the run needs it
// (run.needs_teacher()), teacher_hidden [B, S, H] likewise. A run that needs
// the teacher from rows without it is a logic error (the sources refuse first).
FeatureBatch drafter_batch(const RunContext& run, PaddedBatch batch, const torch::Tensor& rows, int worker);

// A sample's tokens within a batch: row `row`, positions [first, first + length).
struct SamplePlace {
  int64_t sample_id = 0;
  int64_t row = 0;
  int64_t first = 0;
  int64_t length = 0;
};
// In row order; one sample per row unless the batch is packed.
std::vector<SamplePlace> sample_places(const data::PlannedBatch& plan, std::span<const int32_t> lengths);

// Records encoded by write_sample_features, by sample id: the bytes the cache
// stores for them.
using EncodedRecords = std::map<int64_t, std::vector<unsigned char>>;

// Appends to `writer` the samples of `batch` for which `wanted` is true,
// from their rows of `features` ([B, S, W], any device); returns how many.
// With `kept`, their encoded records are kept there too.
int64_t write_sample_features(data::FeatureCacheWriter& writer, const RunContext& run, const PaddedBatch& batch,
                              const torch::Tensor& features, data::FeatureDtype dtype,
                              const std::function<bool(int64_t sample_id)>& wanted, EncodedRecords* kept = nullptr);

// The samples' features from `cache` laid out as the batch's rows ([B, S, W]
// on the drafter's device, zero on padding); samples in `fresh` are decoded
// from those records instead (what a fill just wrote), the same way, so a
// sample trains on the same values whether it was computed now or read.
// Throws DataError naming the shard and the sample for a record that fails
// its checksum, or whose length or tokens (hash) are not the dataset's
// sample's: every record is checked as it is read, whenever it was published.
torch::Tensor cached_features(const RunContext& run, const data::FeatureCacheReader& cache, const PaddedBatch& batch,
                              bool verify, const EncodedRecords* fresh = nullptr);

}  // namespace dflow::nodes
