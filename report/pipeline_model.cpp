#include "report/pipeline_model.hpp"

namespace dflow::report {

int PipelineModel::node_index(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

int PipelineModel::edge_index(std::string_view name) const {
  for (size_t i = 0; i < edges.size(); ++i)
    if (edges[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string declared_edge_name(std::string_view name) {
  std::string out(name);
  const size_t arrow = out.find("->");
  if (arrow == std::string::npos) return out;
  const size_t open = out.find('[', arrow);
  const size_t close = open == std::string::npos ? open : out.find(']', open);
  if (close != std::string::npos) out.erase(open, close - open + 1);
  return out;
}

namespace {
std::pair<std::string, std::string> split_port(std::string_view end) {
  const size_t dot = end.find('.');
  if (dot == std::string_view::npos) return {std::string(end), ""};
  return {std::string(end.substr(0, dot)), std::string(end.substr(dot + 1))};
}
}  // namespace

EdgeEnds edge_ends(std::string_view edge_name) {
  const std::string name = declared_edge_name(edge_name);
  const size_t arrow = name.find("->");
  EdgeEnds ends;
  if (arrow == std::string::npos) return ends;
  std::tie(ends.from, ends.from_port) = split_port(std::string_view(name).substr(0, arrow));
  std::tie(ends.to, ends.to_port) = split_port(std::string_view(name).substr(arrow + 2));
  return ends;
}

namespace {

void add_node_if_missing(PipelineModel& model, const std::string& name, int replicas) {
  if (name.empty() || model.node_index(name) >= 0) return;
  model.nodes.push_back({.name = name, .type = "", .kind = "", .replicas = replicas, .compute = std::nullopt, .when_bound = ""});
}

void read_declared(PipelineModel& model, const nlohmann::json& graph) {
  for (const auto& n : graph.value("nodes", nlohmann::json::array()))
    model.nodes.push_back({.name = n.value("name", ""),
                           .type = n.value("type", ""),
                           .kind = n.value("kind", ""),
                           .replicas = n.value("replicas", 1),
                           .compute = n.contains("compute") ? std::optional<bool>(n.value("compute", false)) : std::nullopt,
                           .when_bound = n.value("when_bound", "")});
  for (const auto& e : graph.value("edges", nlohmann::json::array())) {
    PipelineEdge edge;
    edge.name = e.value("name", "");
    EdgeEnds ends = edge_ends(edge.name);
    std::tie(edge.from, edge.from_port) = split_port(e.value("from", ends.from + "." + ends.from_port));
    std::tie(edge.to, edge.to_port) = split_port(e.value("to", ends.to + "." + ends.to_port));
    edge.capacity = e.value("capacity", 0);
    edge.initial = e.value("initial", 0);
    edge.token = e.value("token", false);
    edge.routed = e.value("routed", false);
    model.edges.push_back(std::move(edge));
  }
  model.declared = !model.nodes.empty();
}

void read_telemetry(PipelineModel& model, const nlohmann::json& telemetry) {
  for (const auto& n : telemetry.value("nodes", nlohmann::json::array()))
    add_node_if_missing(model, n.value("name", ""), n.value("replicas", 1));
  for (const auto& e : telemetry.value("edges", nlohmann::json::array())) {
    const std::string telemetry_name = e.value("name", "");
    const std::string name = declared_edge_name(telemetry_name);
    if (name.empty() || model.edge_index(name) >= 0) continue;
    EdgeEnds ends = edge_ends(name);
    add_node_if_missing(model, ends.from, 1);
    add_node_if_missing(model, ends.to, 1);
    const bool routed = name != telemetry_name;
    const int replicas = model.nodes[model.node_index(ends.to)].replicas;
    const int capacity = e.value("capacity", 0);
    model.edges.push_back({.name = name,
                           .from = ends.from,
                           .to = ends.to,
                           .from_port = ends.from_port,
                           .to_port = ends.to_port,
                           .capacity = routed || replicas <= 1 ? capacity : capacity / replicas,
                           .initial = 0,
                           .token = e.value("token", false),
                           .routed = routed});
  }
}

}  // namespace

PipelineModel pipeline_model(const nlohmann::json& graph, const nlohmann::json* telemetry) {
  PipelineModel model;
  if (graph.is_object()) read_declared(model, graph);
  if (telemetry && telemetry->is_object()) read_telemetry(model, *telemetry);
  for (const auto& e : model.edges) {  // an edge whose end no node list named
    add_node_if_missing(model, e.from, 1);
    add_node_if_missing(model, e.to, 1);
  }
  return model;
}

}  // namespace dflow::report
