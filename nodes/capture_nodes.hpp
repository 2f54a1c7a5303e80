#pragma once
// The capture's own node kinds (nodes/capture_pipeline.hpp), bound to one
// capture's job: they exist only in the registry `dflow cache-features`
// builds for its graph, so no training pipeline can declare them.
//   capture.load   source: the job's batches, in plan order
//   target_forward.capture the target's features of a padded batch, in the target's
//                  device and dtype (what a cache stores), one replica per
//                  target device
//   capture.write  sink: the device->host copy, encoding and the shard write
//                  of the samples the cache lacks, while the target computes
//                  the next batch; the progress log and one record a batch
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/feature_cache.hpp"
#include "data/plan.hpp"
#include "graph/registry.hpp"

namespace dflow::nodes {

struct CaptureJob {
  std::shared_ptr<const data::EpochPlan> plan;  // epoch 0's, which `todo` points into
  std::vector<const data::PlannedBatch*> todo;  // this rank's batches of epoch 0 with a sample the cache lacks
  std::set<int64_t> missing;                    // their samples the cache lacks: what is written
  data::FeatureDtype dtype = data::FeatureDtype::bfloat16;
  std::unique_ptr<data::FeatureCacheWriter> writer;
  std::string tag;                  // "rank 1: " with several ranks, else ""
  double progress_every_s = 5.0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Kept by the sink as it writes (read once the graph has stopped).
  std::atomic<int64_t> batches_written{0};
  std::atomic<int64_t> tokens_computed{0};  // real tokens of the batches written
};

// Adds the three kinds to `registry`, bound to `job` (which must outlive the graph).
void register_capture_nodes(graph::NodeRegistry& registry, CaptureJob& job);
void register_capture_load(graph::NodeRegistry& registry, CaptureJob& job);
void register_capture_target(graph::NodeRegistry& registry);
void register_capture_write(graph::NodeRegistry& registry, CaptureJob& job);

// Runs `body`, naming the batch in any error: "batch 12 of epoch 0 (14 samples, first 803): ...".
void naming_capture_batch(const data::PlannedBatch& plan, const std::function<void()>& body);

// A target_forward replica's body (nodes/target_forward.cpp); with
// `for_cache` it hands the features on in the target's device and dtype (the
// capture's target_forward.capture), else on the drafter's.
std::unique_ptr<graph::NodeBody> make_target_forward(const graph::NodeContext& context, bool for_cache);

}  // namespace dflow::nodes
