#pragma once
// The pipeline `dflow cache-features` runs, derived from the run's own so that
// the features are computed in the shapes training computes them: the nodes
// upstream of the feature source (loader, batching, routing) keep their
// names, types and params, except the loader (a kind that declares
// CaptureRole::loader, load.shards, becomes capture.load: epoch 0's batches
// of this rank that hold a sample the cache lacks); the feature source (a
// kind that declares CaptureRole::target: target_forward, features.cached)
// becomes target_forward.capture with its replicas (the target's own
// features, in its dtype, as a cache stores them); and the training tail is
// replaced by one sink, capture.write, named "write". Edges among the kept nodes keep their
// capacities; the edge into the sink takes the capacity of the training edge
// out of the feature source (it bounds the features waiting to be written).
// The derivation is plain config, by what each node's kind declares
// (RunHooks::capture in nodes/node_kind.hpp).
#include "config/pipeline.hpp"
#include "graph/registry.hpp"

namespace dflow::nodes {

inline constexpr const char* kCaptureSinkName = "write";

// Throws ConfigError naming the pipeline when it has no feature source, two
// of them, or a source other than a loader upstream of it; `kinds` says
// which kind is which.
config::PipelineConfig capture_pipeline(const config::PipelineConfig& training, const graph::NodeRegistry& kinds);

}  // namespace dflow::nodes
