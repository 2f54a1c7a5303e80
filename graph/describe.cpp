// describe(): names, types, params and ports of a declared pipeline, resolved
// against the registry. Structural rules live in describe_rules.cpp.
#include <map>

#include "config/pipeline_override.hpp"
#include "graph/description.hpp"

namespace dflow::graph {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> port_names(const std::vector<PortSpec>& ports) {
  std::vector<std::string> out;
  for (const auto& p : ports) out.push_back(p.name);
  return out;
}

// "did you mean 'x'?" when one is close, else the full list (when short).
std::string suggest(const std::string& word, const std::vector<std::string>& known, const char* what) {
  auto hint = did_you_mean(word, known);
  if (!hint.empty()) return hint;
  if (known.size() <= 24) return "; known " + std::string(what) + ": " + joined(known);
  return "";
}

// Where a node's type came from: a --set that swapped it, else its declaration.
SourceMark type_mark(const config::NodeDecl& decl, const NodeDesc& node) {
  if (auto text = config::override_text(*node.origins, node.key_path + ".type")) return SourceMark{*text};
  return decl.mark;
}

void resolve_node(NodeDesc& node, const config::NodeDecl& decl, size_t index, const config::PipelineConfig& pipeline,
                  const NodeRegistry& registry) {
  node.name = decl.name;
  node.type = decl.type;
  node.replicas = decl.replicas;
  node.key_path = "pipeline.nodes[" + std::to_string(index) + "]";
  node.mark = decl.mark;
  node.params_mark = decl.params_mark;
  node.params = decl.params;
  if (pipeline.origins) {
    node.origins = pipeline.origins;
  } else {
    auto origins = std::make_shared<config::Origins>();
    origins->file = "<pipeline>";
    node.origins = std::move(origins);
  }
  if (node.name.find('.') != std::string::npos)
    throw ConfigError(decl.mark, node.key_path + ".name", "node name '" + node.name + "' may not contain '.' (edges write 'node.port')");
  node.spec = registry.find(decl.type);
  if (!node.spec)
    throw ConfigError(type_mark(decl, node), node.key_path + ".type",
                      "unknown node type '" + decl.type + "'" + suggest(decl.type, registry.types(), "types"));
  node.kind = node.spec->kind;
  node.description = node.spec->description;
  node.compute = node.spec->compute;
  node.when_bound = node.spec->when_bound;
  node.inputs = node.spec->inputs;
  node.outputs = node.spec->outputs;
  node.input_connected.assign(node.inputs.size(), 0);
  node.output_connected.assign(node.outputs.size(), 0);
  config::YamlSection params(decl.params, node.key_path + ".params", node.origins);
  if (node.spec->check_params) {
    try {
      node.spec->check_params(params);
    } catch (const ConfigError& e) {
      // The key path names the node by its index; say which node that is.
      throw ConfigError(std::string(e.what()) + " (node '" + node.name + "', " + decl.type + ")");
    }
  }
  params.finish();  // refuses keys the node kind did not read, with a suggestion
}

struct Endpoint {
  int node = -1;
  int port = -1;
};

Endpoint resolve_endpoint(const GraphDescription& graph, const std::string& text, bool output, const config::EdgeDecl& edge,
                          const std::string& key) {
  auto dot = text.find('.');
  std::string node_name = text.substr(0, dot);
  std::string port_name = dot == std::string::npos ? "" : text.substr(dot + 1);
  Endpoint at;
  at.node = graph.node_index(node_name);
  if (at.node < 0) {
    std::vector<std::string> names;
    for (const auto& n : graph.nodes) names.push_back(n.name);
    throw ConfigError(edge.mark, key, "unknown node '" + node_name + "'" + suggest(node_name, names, "nodes"));
  }
  const NodeDesc& node = graph.nodes[at.node];
  const auto& ports = output ? node.outputs : node.inputs;
  const char* side = output ? "output" : "input";
  std::string who = "node '" + node.name + "' (" + node.type + ")";
  if (ports.empty())
    throw ConfigError(edge.mark, key,
                      who + (output ? " has no output ports" : node.kind == NodeKind::source ? " is a source and takes no input" : " has no input ports"));
  if (port_name.empty()) {
    if (ports.size() > 1)
      throw ConfigError(edge.mark, key, who + " has several " + side + " ports (" + joined(port_names(ports)) + "): write '" +
                                            node.name + ".<port>'");
    at.port = 0;
    return at;
  }
  for (size_t i = 0; i < ports.size(); ++i)
    if (ports[i].name == port_name) at.port = static_cast<int>(i);
  if (at.port < 0)
    throw ConfigError(edge.mark, key, who + " has no " + side + " port '" + port_name + "'" +
                                          did_you_mean(port_name, port_names(ports)) + " (" + side + " ports: " +
                                          joined(port_names(ports)) + ")");
  return at;
}

void resolve_edges(GraphDescription& graph, const config::PipelineConfig& pipeline) {
  std::map<std::pair<int, int>, size_t> output_used;  // (node, out port) -> edge index
  for (size_t k = 0; k < pipeline.edges.size(); ++k) {
    const config::EdgeDecl& decl = pipeline.edges[k];
    EdgeDesc edge;
    edge.key_path = "pipeline.edges[" + std::to_string(k) + "]";
    edge.mark = decl.mark;
    edge.capacity = decl.capacity;
    edge.token = decl.token;
    edge.initial = decl.initial;
    Endpoint from = resolve_endpoint(graph, decl.from, true, decl, edge.key_path + ".from");
    Endpoint to = resolve_endpoint(graph, decl.to, false, decl, edge.key_path + ".to");
    edge.from_node = from.node, edge.from_port = from.port, edge.to_node = to.node, edge.to_port = to.port;
    NodeDesc& producer = graph.nodes[from.node];
    NodeDesc& consumer = graph.nodes[to.node];
    const PortSpec& out = producer.outputs[from.port];
    const PortSpec& in = consumer.inputs[to.port];
    edge.name = producer.name + "." + out.name + "->" + consumer.name + "." + in.name;
    edge.routed = out.routed;
    edge.ordered = in.ordered;
    auto [it, fresh] = output_used.emplace(std::make_pair(from.node, from.port), k);
    if (!fresh)
      throw ConfigError(decl.mark, edge.key_path + ".from",
                        "output port '" + producer.name + "." + out.name + "' is already connected by " +
                            graph.edges[it->second].key_path + " (" + graph.edges[it->second].mark.str() +
                            "); an output port feeds exactly one edge");
    producer.output_connected[from.port] = 1;
    consumer.input_connected[to.port] = 1;
    graph.edges.push_back(std::move(edge));
  }
}

void check_connected(const GraphDescription& graph) {
  for (const auto& node : graph.nodes) {
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (!node.input_connected[i] && !node.inputs[i].optional)
        throw ConfigError(node.mark, node.key_path, "input port '" + node.name + "." + node.inputs[i].name +
                                                        "' is not connected; add an edge {to: " + node.name + "." +
                                                        node.inputs[i].name + "}");
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (!node.output_connected[i] && !node.outputs[i].optional)
        throw ConfigError(node.mark, node.key_path, "output port '" + node.name + "." + node.outputs[i].name +
                                                        "' is not connected; add an edge {from: " + node.name + "." +
                                                        node.outputs[i].name + "}");
  }
}

}  // namespace

int GraphDescription::node_index(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

GraphDescription describe(const config::PipelineConfig& pipeline, const NodeRegistry& registry) {
  GraphDescription graph;
  for (size_t i = 0; i < pipeline.nodes.size(); ++i) {
    const auto& decl = pipeline.nodes[i];
    int first = graph.node_index(decl.name);
    if (first >= 0)
      throw ConfigError(decl.mark, "pipeline.nodes[" + std::to_string(i) + "].name",
                        "duplicate node name '" + decl.name + "' (first declared at " + graph.nodes[first].mark.str() + ")");
    NodeDesc node;
    resolve_node(node, decl, i, pipeline, registry);
    graph.nodes.push_back(std::move(node));
  }
  resolve_edges(graph, pipeline);
  resolve_types(graph);
  check_connected(graph);
  check_structure(graph);
  check_cycles(graph);
  assign_credit_takers(graph);
  return graph;
}

}  // namespace dflow::graph
