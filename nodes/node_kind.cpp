#include "nodes/node_kind.hpp"

#include <algorithm>

namespace dflow::nodes {

std::string node_path(const config::PipelineConfig& pipeline, const config::NodeDecl& node) {
  const auto& nodes = pipeline.nodes;
  const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.name == node.name; });
  return "pipeline.nodes[" + std::to_string(it - nodes.begin()) + "]";
}

config::YamlSection node_params(const config::PipelineConfig& pipeline, const config::NodeDecl& node) {
  return config::YamlSection(node.params, node_path(pipeline, node) + ".params", pipeline.origins);
}

void add_node_kind(graph::NodeRegistry& registry, graph::NodeSpec spec, RunHooks hooks) {
  spec.extension = std::move(hooks);
  registry.add(std::move(spec));
}

const RunHooks* run_hooks(const graph::NodeRegistry& registry, const std::string& type) {
  const graph::NodeSpec* spec = registry.find(type);
  return spec ? std::any_cast<RunHooks>(&spec->extension) : nullptr;
}

}  // namespace dflow::nodes
