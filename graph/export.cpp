#include "graph/export.hpp"

#include <sstream>

namespace dflow::graph {

namespace {
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string edge_label(const GraphDescription& graph, const EdgeDesc& e) {
  const NodeDesc& from = graph.nodes[e.from_node];
  const NodeDesc& to = graph.nodes[e.to_node];
  std::string label;
  if (from.outputs.size() > 1 || to.inputs.size() > 1)
    label += from.outputs[e.from_port].name + " -> " + to.inputs[e.to_port].name + "\\n";
  if (e.token) label += "token ";
  label += "cap " + std::to_string(e.capacity);
  if (to.replicas > 1) label += " per replica";
  if (e.initial > 0) label += ", initial " + std::to_string(e.initial);
  if (e.routed) label += "\\nrouted";
  if (e.ordered) label += "\\nordered";
  return label;
}
}  // namespace

std::string to_dot(const GraphDescription& graph) {
  std::ostringstream out;
  out << "digraph pipeline {\n"
      << "  rankdir=LR;\n"
      << "  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
      << "  edge [fontname=\"Helvetica\", fontsize=10];\n";
  for (const auto& n : graph.nodes) {
    std::string label = n.name + "\\n" + n.type + (n.replicas > 1 ? " x" + std::to_string(n.replicas) : "");
    out << "  " << quoted(n.name) << " [label=\"" << label << "\"";
    if (n.replicas > 1) out << ", peripheries=2";
    if (n.kind == NodeKind::source) out << ", shape=invhouse";
    out << "];\n";
  }
  for (const auto& e : graph.edges) {
    out << "  " << quoted(graph.nodes[e.from_node].name) << " -> " << quoted(graph.nodes[e.to_node].name) << " [label=\""
        << edge_label(graph, e) << "\"";
    if (e.token) out << ", style=dashed, constraint=false";
    if (e.routed) out << ", style=bold";
    out << "];\n";
  }
  out << "}\n";
  return out.str();
}

nlohmann::json to_json(const GraphDescription& graph, const TelemetrySnapshot* telemetry) {
  auto ports = [](const std::vector<PortSpec>& specs) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : specs)
      out.push_back({{"name", p.name}, {"type", p.type}, {"ordered", p.ordered}, {"routed", p.routed}, {"optional", p.optional}});
    return out;
  };
  nlohmann::json nodes = nlohmann::json::array(), edges = nlohmann::json::array();
  for (const auto& n : graph.nodes)
    nodes.push_back({{"name", n.name}, {"type", n.type}, {"kind", kind_name(n.kind)}, {"replicas", n.replicas},
                     {"description", n.description}, {"inputs", ports(n.inputs)}, {"outputs", ports(n.outputs)},
                     {"join_ports", n.join_ports}, {"compute", n.compute}, {"when_bound", n.when_bound}});
  for (const auto& e : graph.edges) {
    const NodeDesc& from = graph.nodes[e.from_node];
    const NodeDesc& to = graph.nodes[e.to_node];
    edges.push_back({{"name", e.name}, {"from", from.name + "." + from.outputs[e.from_port].name},
                     {"to", to.name + "." + to.inputs[e.to_port].name}, {"type", e.type}, {"capacity", e.capacity},
                     {"token", e.token}, {"initial", e.initial}, {"routed", e.routed}, {"ordered", e.ordered},
                     {"credit_taker", graph.nodes[e.credit_taker].name}});
  }
  nlohmann::json out = {{"nodes", nodes}, {"edges", edges}};
  if (telemetry) out["telemetry"] = to_json(*telemetry);
  return out;
}

}  // namespace dflow::graph
