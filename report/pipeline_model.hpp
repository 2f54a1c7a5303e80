#pragma once
// The pipeline the report draws: the declared graph (graph.json) when the run
// wrote one, otherwise what the telemetry's node and edge names imply.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::report {

struct PipelineNode {
  std::string name;
  std::string type;  // "" when only telemetry named it
  std::string kind;  // source, function, router ("" when unknown)
  int replicas = 1;
  // What the node's kind declares about its load (graph::NodeSpec::compute,
  // when_bound), from graph.json; compute is unset when the file does not
  // say (only telemetry named the node, or a run older than the field).
  std::optional<bool> compute;
  std::string when_bound;
};

struct PipelineEdge {
  std::string name;  // declared: "from.port->to.port"
  std::string from, to;  // node names
  std::string from_port, to_port;
  int capacity = 0;  // as declared (per consumer replica)
  int initial = 0;
  bool token = false;
  bool routed = false;
};

struct PipelineModel {
  std::vector<PipelineNode> nodes;
  std::vector<PipelineEdge> edges;
  bool declared = false;  // from graph.json
  int node_index(std::string_view name) const;  // -1 when absent
  int edge_index(std::string_view name) const;
};

// graph: graph.json (graph::to_json of the description) or null; telemetry:
// a snapshot (graph::to_json) or nullptr. Edges and nodes only in telemetry
// are added too, so nothing measured goes undrawn.
PipelineModel pipeline_model(const nlohmann::json& graph, const nlohmann::json* telemetry);

// "route.out->target[1].in" -> "route.out->target.in": the declared edge a
// replica's edge belongs to.
std::string declared_edge_name(std::string_view telemetry_edge);

// "route.out->target[1].in" -> {"route", "out", "target", "in"}.
struct EdgeEnds {
  std::string from, from_port, to, to_port;
};
EdgeEnds edge_ends(std::string_view edge_name);

}  // namespace dflow::report
