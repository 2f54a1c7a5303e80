#pragma once
// The generic node kinds that belong to the runtime, not to training:
//   reorder  in (ordered, any type) -> out: restores sequence order after replicas
//   pass     in (any type) -> out: forwards every message unchanged
#include "graph/registry.hpp"

namespace dflow::graph {

void register_graph_nodes(NodeRegistry& registry);

}  // namespace dflow::graph
