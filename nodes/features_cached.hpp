#pragma once
// features.cached: the feature source that reads the target's features from
// a feature cache (data/feature_cache.hpp) instead of running the target. It
// takes target_forward's place by changing `type:`; with `fill: true` it
// runs the target for samples the cache lacks and writes them, so that
// epoch 0 fills the cache and later epochs read it (the hybrid mode).
#include <optional>
#include <string>

#include "config/config.hpp"
#include "config/yaml_reader.hpp"
#include "data/feature_cache.hpp"
#include "graph/registry.hpp"

namespace dflow::nodes {

class RunContext;

struct CachedFeaturesParams {
  std::string dir;          // the cache directory
  bool fill = false;        // compute and write the samples it lacks (epoch 0 of a hybrid run)
  std::string dtype = "bfloat16";  // storage dtype when this run creates the cache
  bool verify = true;       // checksum every record as it is read
  int shard_mb = 256;       // shard size when writing
};
CachedFeaturesParams read_cached_features_params(config::YamlSection& params);

// The cache of the pipeline's first node whose kind reads one (RunHooks::feature_cache),
// if it has one: what `dflow cache-features` fills.
std::optional<CachedFeaturesParams> cached_features_node(const config::Config& config, const graph::NodeRegistry& kinds);

// The manifest of a cache made for this run: the target's fingerprints, the
// drafter's feature layers and the dataset, stored in `dtype`.
data::FeatureCacheManifest run_feature_manifest(const RunContext& run, data::FeatureDtype dtype, std::string source);

// Bytes the samples `ids` take in a cache of `manifest` (rows x row bytes).
uint64_t projected_feature_bytes(const RunContext& run, const data::FeatureCacheManifest& manifest,
                                 std::span<const int64_t> ids);

// Refuses (DataError naming the samples) cached records whose lengths
// differ from the dataset's samples of the same id, from the index alone (no
// record or token is read); tokens are checked as records are read
// (cached_features). With `tokens`, also each record's tokens hash in the
// index against the dataset's tokens (read, never the records): what a
// filler checks, since it skips the samples it finds cached and never reads
// them.
void check_cached_samples(const RunContext& run, const data::FeatureCacheReader& cache, bool tokens = false);

}  // namespace dflow::nodes
