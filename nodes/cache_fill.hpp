#pragma once
// Filling a feature cache offline (`dflow cache-features`): the target
// forward over epoch 0's plan of the run's own batching, so every sample's
// features are computed in the shapes training computes them; each rank
// takes batches index % world_size == rank and writes its own shards.
// Resumable: samples of published shards are skipped.
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "nodes/features_cached.hpp"

namespace dflow::nodes {

struct FillOptions {
  CachedFeaturesParams params;  // dir, dtype (storage), shard_mb
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  double progress_every_s = 5.0;
};

struct FillReport {
  int64_t samples_written = 0;
  int64_t tokens_computed = 0;  // real tokens of the batches the target ran over
  uint64_t bytes_written = 0;
  uint64_t bytes_per_token = 0;
  int64_t cached_samples = 0;   // in the cache afterwards (all ranks' published shards)
  int64_t dataset_samples = 0;
  double seconds = 0;
};

// Throws ConfigError for bad options, DataError for a cache made from
// something else or a full disk (what was published is kept).
FillReport fill_feature_cache(const config::Config& config, const FillOptions& options);

}  // namespace dflow::nodes
