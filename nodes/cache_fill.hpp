#pragma once
// Filling a feature cache offline (`dflow cache-features`): the target
// forward over epoch 0's plan of the run's own batching, so every sample's
// features are computed in the shapes training computes them; each rank
// takes batches index % world_size == rank and writes its own shards.
// Resumable: samples of published shards are skipped.
//
// It runs as a graph (nodes/capture_pipeline.hpp): the run's loader, batching
// and routing nodes, its target replicas and a writer sink, with bounded
// edges, so that collating, the forward, the copy and the write overlap.
// Its records (one a batch, with the graph's telemetry) and graph.json go to
// <run.out_dir>/cache-features (rank 0's), which `dflow report` reads.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "nodes/features_cached.hpp"

namespace dflow::report {
class LiveServer;
}

namespace dflow::nodes {

struct FillOptions {
  CachedFeaturesParams params;  // dir, dtype (storage), shard_mb
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // Store the target's last hidden state after its final norm too (what
  // loss: kl reads), also when the config's drafter trains with ce; a config
  // whose drafter trains with loss: kl, or a cache that already has it, does so anyway.
  bool last_layer = false;
  double progress_every_s = 5.0;
  report::LiveServer* live = nullptr;  // --serve: the capture's records are published to it
  // Bytes free on the cache's disk (a test's stand-in; default: the file system's).
  std::function<uint64_t(const std::filesystem::path& dir)> free_bytes;
};

struct FillReport {
  int64_t samples_written = 0;
  int64_t tokens_computed = 0;  // real tokens of the batches the target ran over
  int64_t batches_computed = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_per_token = 0;
  int64_t cached_samples = 0;   // in the cache afterwards (all ranks' published shards)
  int64_t dataset_samples = 0;
  double seconds = 0;
  std::string run_dir;                // the capture's records and graph.json
  nlohmann::json telemetry;           // the capture graph's at the end (null when nothing was computed)
  std::vector<std::string> findings;  // where the capture waited, in words (report::analyze)
};

// Throws ConfigError for bad options, DataError for a cache made from
// something else or a full disk (what was published is kept).
FillReport fill_feature_cache(const config::Config& config, const FillOptions& options);

// Refuses (DataError) a disk with less free than what every rank has yet to
// write to the shared `dir`: `all_ranks_bytes`, of which this rank writes
// `this_rank_bytes`. Says how much is needed in total and how much is free.
void check_capture_space(const std::filesystem::path& dir, uint64_t all_ranks_bytes, uint64_t this_rank_bytes,
                         int world_size, uint64_t free_bytes);

}  // namespace dflow::nodes
