#include "nodes/node_kind.hpp"

#include <algorithm>

#include "config/log.hpp"

namespace dflow::nodes {

std::string node_path(const config::PipelineConfig& pipeline, const config::NodeDecl& node) {
  const auto& nodes = pipeline.nodes;
  const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.name == node.name; });
  return "pipeline.nodes[" + std::to_string(it - nodes.begin()) + "]";
}

config::YamlSection node_params(const config::PipelineConfig& pipeline, const config::NodeDecl& node) {
  return config::YamlSection(node.params, node_path(pipeline, node) + ".params", pipeline.origins);
}

config::Config without_nodes_that_are_off(config::Config config, const graph::NodeRegistry& registry) {
  std::vector<std::string> off;
  for (const auto& node : config.pipeline.nodes) {
    const RunHooks* hooks = run_hooks(registry, node.type);
    if (!hooks || !hooks->off_because) continue;
    if (const std::string why = hooks->off_because(config, node); !why.empty()) {
      log::info("train", "node '" + node.name + "' (" + node.type + ") is off: " + why);
      off.push_back(node.name);
    }
  }
  auto is_off = [&](const std::string& endpoint) {  // "node" or "node.port"
    return std::find(off.begin(), off.end(), endpoint.substr(0, endpoint.find('.'))) != off.end();
  };
  auto& p = config.pipeline;
  std::erase_if(p.nodes, [&](const config::NodeDecl& n) { return is_off(n.name); });
  std::erase_if(p.edges, [&](const config::EdgeDecl& e) { return is_off(e.from) || is_off(e.to); });
  return config;
}

void add_node_kind(graph::NodeRegistry& registry, graph::NodeSpec spec, RunHooks hooks) {
  spec.extension = std::move(hooks);
  registry.add(std::move(spec));
}

const RunHooks* run_hooks(const graph::NodeRegistry& registry, const std::string& type) {
  const graph::NodeSpec* spec = registry.find(type);
  return spec ? run_hooks(*spec) : nullptr;
}

const RunHooks* run_hooks(const graph::NodeSpec& spec) { return std::any_cast<RunHooks>(&spec.extension); }

}  // namespace dflow::nodes
