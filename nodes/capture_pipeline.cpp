#include "nodes/capture_pipeline.hpp"

#include <set>
#include <string>

#include "config/errors.hpp"
#include "nodes/node_kind.hpp"

namespace dflow::nodes {

namespace {

std::string node_of(const std::string& endpoint) { return endpoint.substr(0, endpoint.find('.')); }

CaptureRole role_of(const graph::NodeRegistry& kinds, const std::string& type) {
  const RunHooks* hooks = run_hooks(kinds, type);
  return hooks ? hooks->capture : CaptureRole::none;
}

// The kinds that declare `role`, for messages: "features.cached or target_forward".
std::string kinds_with(const graph::NodeRegistry& kinds, CaptureRole role) {
  std::string out;
  for (const auto& type : kinds.types())
    if (role_of(kinds, type) == role) out += (out.empty() ? "" : " or ") + type;
  return out;
}

}  // namespace

config::PipelineConfig capture_pipeline(const config::PipelineConfig& training, const graph::NodeRegistry& kinds) {
  const config::NodeDecl* source = nullptr;
  for (const auto& node : training.nodes) {
    if (role_of(kinds, node.type) != CaptureRole::target) continue;
    if (source)
      throw ConfigError(node.mark, "pipeline.nodes." + node.name,
                        "cache-features: the pipeline has two feature sources ('" + source->name + "' and '" +
                            node.name + "'); the capture runs the target of one");
    source = &node;
  }
  if (!source)
    throw ConfigError("cache-features: the pipeline has no feature source whose target the capture can run (a node of "
                      "type " + kinds_with(kinds, CaptureRole::target) +
                      "): nothing there runs the target whose features the cache holds");

  // The feature source and everything its data comes from (token edges are
  // the training loop's, never upstream of the target).
  std::set<std::string> kept{source->name};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& edge : training.edges)
      if (!edge.token && kept.count(node_of(edge.to)) && kept.insert(node_of(edge.from)).second) grew = true;
  }

  config::PipelineConfig capture;
  capture.origins = training.origins;
  capture.from_default = training.from_default;
  int sink_capacity = 2;
  for (const auto& edge : training.edges) {
    if (edge.token) continue;
    const bool from_kept = kept.count(node_of(edge.from)) > 0, to_kept = kept.count(node_of(edge.to)) > 0;
    if (from_kept && to_kept) capture.edges.push_back(edge);
    if (node_of(edge.from) == source->name && !to_kept) sink_capacity = edge.capacity;
  }
  std::set<std::string> fed;
  for (const auto& edge : capture.edges) fed.insert(node_of(edge.to));
  for (const auto& node : training.nodes) {
    if (!kept.count(node.name)) continue;
    if (node.name == kCaptureSinkName)
      throw ConfigError(node.mark, "pipeline.nodes." + node.name,
                        std::string("cache-features: a node upstream of the target is named '") + kCaptureSinkName +
                            "', the name of the capture's writer: rename it");
    config::NodeDecl kept_node = node;
    if (&node == source) {
      kept_node.type = "target_forward.capture";
      // A features.cached node's dir and dtype go to the writer. reset(), not
      // `= YAML::Node()`: a copied yaml-cpp node shares its data, and
      // assigning to it would empty the training config's params too.
      kept_node.params.reset();
    } else if (!fed.count(node.name)) {
      if (role_of(kinds, node.type) != CaptureRole::loader)
        throw ConfigError(node.mark, "pipeline.nodes." + node.name,
                          "cache-features: node '" + node.name + "' (" + node.type +
                              ") feeds the target, but the capture can read batches only where the pipeline "
                              "reads them with " + kinds_with(kinds, CaptureRole::loader));
      kept_node.type = "capture.load";
    }
    capture.nodes.push_back(std::move(kept_node));
  }
  config::NodeDecl sink;
  sink.name = kCaptureSinkName;
  sink.type = "capture.write";
  sink.mark = source->mark;
  capture.nodes.push_back(sink);
  config::EdgeDecl into_sink;
  into_sink.from = source->name;
  into_sink.to = kCaptureSinkName;
  into_sink.capacity = sink_capacity;
  into_sink.mark = source->mark;
  capture.edges.push_back(into_sink);
  return capture;
}

}  // namespace dflow::nodes
