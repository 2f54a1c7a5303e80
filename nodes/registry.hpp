#pragma once
// The training graph's node kinds. register_all_nodes() is the one place they
// are added (nothing is dropped by the linker); a new node is one file in
// nodes/ plus one line there.
#include "graph/registry.hpp"

namespace dflow::nodes {

// The generic graph nodes (reorder, ...) and every training node.
void register_all_nodes(graph::NodeRegistry& registry);
const graph::NodeRegistry& default_registry();

void register_load_shards(graph::NodeRegistry& registry);
void register_pad_bucket(graph::NodeRegistry& registry);
void register_routers(graph::NodeRegistry& registry);
void register_target_forward(graph::NodeRegistry& registry);
void register_features_cached(graph::NodeRegistry& registry);
void register_features_engine(graph::NodeRegistry& registry);
void register_drafter_step(graph::NodeRegistry& registry);
void register_accumulate(graph::NodeRegistry& registry);
void register_optimizer_step(graph::NodeRegistry& registry);
void register_metric_sample(graph::NodeRegistry& registry);
void register_checkpoint(graph::NodeRegistry& registry);
void register_eval_tau(graph::NodeRegistry& registry);

}  // namespace dflow::nodes
