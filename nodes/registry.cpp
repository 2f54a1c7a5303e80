#include "nodes/registry.hpp"

#include "graph/builtin_nodes.hpp"

namespace dflow::nodes {

void register_all_nodes(graph::NodeRegistry& registry) {
  graph::register_graph_nodes(registry);  // reorder and the generic nodes
  register_load_shards(registry);
  register_pad_bucket(registry);
  register_routers(registry);
  register_target_forward(registry);
  register_features_cached(registry);
  register_features_engine(registry);
  register_drafter_step(registry);
  register_accumulate(registry);
  register_optimizer_step(registry);
  register_metric_sample(registry);
  register_checkpoint(registry);
  register_eval_tau(registry);
}

const graph::NodeRegistry& default_registry() {
  static const graph::NodeRegistry registry = [] {
    graph::NodeRegistry r;
    register_all_nodes(r);
    return r;
  }();
  return registry;
}

}  // namespace dflow::nodes
