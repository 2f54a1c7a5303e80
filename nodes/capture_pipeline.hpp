#pragma once
// The pipeline `dflow cache-features` runs, derived from the run's own so that
// the features are computed in the shapes training computes them: the nodes
// upstream of the feature source (loader, batching, routing) keep their
// names, types and params, except the loader (load.shards becomes
// capture.load: epoch 0's batches of this rank that hold a sample the cache
// lacks); the feature source (target_forward, or features.cached) becomes
// target_forward.capture with its replicas (the target's own features, in its dtype,
// as a cache stores them); and the training tail is replaced by one sink,
// capture.write, named "write". Edges among the kept nodes keep their
// capacities; the edge into the sink takes the capacity of the training edge
// out of the feature source (it bounds the features waiting to be written).
// No torch here: the derivation is plain config.
#include "config/pipeline.hpp"

namespace dflow::nodes {

inline constexpr const char* kCaptureSinkName = "write";

// Throws ConfigError naming the pipeline when it has no feature source, two
// of them, or a source other than load.shards upstream of it.
config::PipelineConfig capture_pipeline(const config::PipelineConfig& training);

}  // namespace dflow::nodes
