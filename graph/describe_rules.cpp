// Structural rules on a resolved pipeline: port types, replicas and routers,
// ordered edges, cycles, and the join width of every node.
#include <functional>

#include "graph/description.hpp"

namespace dflow::graph {

namespace {
std::string any_to_name(const std::string& type) { return type == kAnyType ? "any type" : "'" + type + "'"; }

std::vector<int> edges_into(const GraphDescription& graph, int node, int port = -1) {
  std::vector<int> out;
  for (size_t k = 0; k < graph.edges.size(); ++k)
    if (graph.edges[k].to_node == node && (port < 0 || graph.edges[k].to_port == port)) out.push_back(static_cast<int>(k));
  return out;
}

std::string replicated(const NodeDesc& node) { return "'" + node.name + "' x" + std::to_string(node.replicas); }
}  // namespace

void resolve_types(GraphDescription& graph) {
  for (auto& e : graph.edges) e.type = graph.nodes[e.from_node].outputs[e.from_port].type;
  // An output typed "*" carries what arrives on its node's only input; follow
  // such pass-through chains until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& e : graph.edges) {
      const NodeDesc& producer = graph.nodes[e.from_node];
      if (e.type != kAnyType || producer.inputs.size() != 1) continue;
      for (int k : edges_into(graph, e.from_node))
        if (graph.edges[k].type != kAnyType) e.type = graph.edges[k].type, changed = true;
    }
  }
  for (auto& e : graph.edges) {
    NodeDesc& consumer = graph.nodes[e.to_node];
    const std::string& takes = consumer.inputs[e.to_port].type;
    if (e.type != kAnyType && takes != kAnyType && e.type != takes)
      throw ConfigError(e.mark, e.key_path,
                        "type mismatch: '" + e.name.substr(0, e.name.find("->")) + "' carries " + any_to_name(e.type) +
                            " but '" + consumer.name + "." + consumer.inputs[e.to_port].name + "' takes " + any_to_name(takes));
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    NodeDesc& node = graph.nodes[n];
    for (size_t p = 0; p < node.inputs.size(); ++p) {
      if (node.inputs[p].type != kAnyType) continue;
      for (int k : edges_into(graph, static_cast<int>(n), static_cast<int>(p))) {
        const EdgeDesc& e = graph.edges[k];
        if (e.type == kAnyType) continue;
        if (node.inputs[p].type != kAnyType && node.inputs[p].type != e.type)
          throw ConfigError(e.mark, e.key_path, "edges into '" + node.name + "." + node.inputs[p].name +
                                                    "' carry different types: '" + node.inputs[p].type + "' and '" + e.type + "'");
        node.inputs[p].type = e.type;
      }
    }
  }
  for (const auto& e : graph.edges) graph.nodes[e.from_node].outputs[e.from_port].type = e.type;
}

void check_structure(GraphDescription& graph) {
  for (const auto& node : graph.nodes) {
    if (node.replicas <= 1) continue;
    if (node.kind == NodeKind::source)
      throw ConfigError(node.mark, node.key_path + ".replicas",
                        "source '" + node.name + "' cannot be replicated (its sequence numbers would collide); replicate the node it feeds");
    if (node.kind == NodeKind::router)
      throw ConfigError(node.mark, node.key_path + ".replicas",
                        "router '" + node.name + "' cannot be replicated: it is the one place that picks a replica");
    for (const auto& in : node.inputs)
      if (in.ordered)
        throw ConfigError(node.mark, node.key_path + ".replicas",
                          "node '" + node.name + "' restores order on input '" + in.name + "' and cannot be replicated");
  }
  for (const auto& e : graph.edges) {
    const NodeDesc& producer = graph.nodes[e.from_node];
    const NodeDesc& consumer = graph.nodes[e.to_node];
    if (producer.replicas > 1 && consumer.replicas > 1)
      throw ConfigError(e.mark, e.key_path, "an edge between two replicated nodes (" + replicated(producer) + " -> " +
                                                replicated(consumer) + ") is not supported; put a router or a single node between them");
    if (e.token && (e.routed || e.ordered))
      throw ConfigError(e.mark, e.key_path + ".token", "a token edge cannot " + std::string(e.routed ? "leave a routed port" : "enter an ordered port"));
    size_t sharing = edges_into(graph, e.to_node, e.to_port).size();
    std::string port = "'" + consumer.name + "." + consumer.inputs[e.to_port].name + "'";
    if (e.routed && sharing > 1)
      throw ConfigError(e.mark, e.key_path, "the routed edge from '" + producer.name + "' must be the only edge into " + port);
    if (e.ordered && sharing > 1)
      throw ConfigError(e.mark, e.key_path, "ordered port " + port + " takes exactly one edge (its sequence has one origin)");
  }
}

void check_cycles(const GraphDescription& graph) {
  enum Colour { white, grey, black };
  std::vector<Colour> colour(graph.nodes.size(), white);
  std::vector<int> path;  // nodes on the current DFS path
  std::function<void(int)> visit = [&](int n) {
    colour[n] = grey;
    path.push_back(n);
    for (const auto& e : graph.edges) {
      if (e.from_node != n || e.token) continue;
      if (colour[e.to_node] == grey) {
        std::string cycle;
        auto start = std::find(path.begin(), path.end(), e.to_node);
        for (auto it = start; it != path.end(); ++it) cycle += graph.nodes[*it].name + " -> ";
        cycle += graph.nodes[e.to_node].name;
        throw ConfigError(e.mark, e.key_path,
                          "cycle " + cycle + " passes through no token edge; a cycle is allowed only through an edge marked "
                          "'token: true' that returns the resource (with 'initial' tokens placed at start)");
      }
      if (colour[e.to_node] == white) visit(e.to_node);
    }
    path.pop_back();
    colour[n] = black;
  };
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    if (colour[n] == white) visit(static_cast<int>(n));
}

void assign_credit_takers(GraphDescription& graph) {
  for (size_t k = 0; k < graph.edges.size(); ++k) {
    EdgeDesc& e = graph.edges[k];
    e.credit_taker = e.from_node;
    if (!e.ordered) continue;
    // Behind a fan-out (replicas, or a router even to one replica) the items
    // reach the ordered edge in any order; its credits must be taken where the
    // order is still intact: at the node that fans out.
    const NodeDesc& producer = graph.nodes[e.from_node];
    std::vector<int> feeding = edges_into(graph, e.from_node);
    bool fanned_out = producer.replicas > 1;
    for (int f : feeding) fanned_out = fanned_out || graph.edges[f].routed;
    if (!fanned_out) continue;
    if (feeding.size() != 1)
      throw ConfigError(e.mark, e.key_path, "ordered edge '" + e.name + "' comes from fanned-out '" + producer.name +
                                                "', which must have exactly one input edge (it has " + std::to_string(feeding.size()) +
                                                ") so that the ordered edge's credits are taken where the fan-out happens");
    if (graph.edges[feeding[0]].token)
      throw ConfigError(e.mark, e.key_path, "ordered edge '" + e.name + "' is fanned out by token edge '" +
                                                graph.edges[feeding[0]].name + "'; fan out data, not tokens");
    e.credit_taker = graph.edges[feeding[0]].from_node;
    e.carried_by = feeding[0];
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    NodeDesc& node = graph.nodes[n];
    int inputs = 0, credits = 0;
    for (char c : node.input_connected) inputs += c ? 1 : 0;
    for (const auto& e : graph.edges) credits += e.credit_taker == static_cast<int>(n) ? 1 : 0;
    node.join_ports = inputs + credits + (node.kind == NodeKind::source ? 1 : 0);
    if (node.join_ports > kMaxJoinPorts)
      throw ConfigError(node.mark, node.key_path,
                        "node '" + node.name + "' needs " + std::to_string(node.join_ports) + " join ports (" + std::to_string(inputs) +
                            " inputs + " + std::to_string(credits) + " output credits" + (node.kind == NodeKind::source ? " + 1 ticket" : "") +
                            "); a node joins at most " + std::to_string(kMaxJoinPorts) + ": split it into two nodes");
  }
}

}  // namespace dflow::graph
