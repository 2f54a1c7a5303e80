#include "nodes/node_kind.hpp"

namespace dflow::nodes {

void add_node_kind(graph::NodeRegistry& registry, graph::NodeSpec spec, RunHooks hooks) {
  spec.extension = std::move(hooks);
  registry.add(std::move(spec));
}

const RunHooks* run_hooks(const graph::NodeRegistry& registry, const std::string& type) {
  const graph::NodeSpec* spec = registry.find(type);
  return spec ? std::any_cast<RunHooks>(&spec->extension) : nullptr;
}

}  // namespace dflow::nodes
