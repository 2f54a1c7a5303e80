#pragma once
// The resolved structure of a declared pipeline: every name, port and type
// checked, without building any node body (no model loading). Exports and the
// builder both start from here.
#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/errors.hpp"
#include "config/pipeline.hpp"
#include "graph/ports.hpp"
#include "graph/registry.hpp"

namespace dflow::graph {

// oneTBB's join_node is generated for a fixed number of ports; dflow's shells
// are generated for widths 1..kMaxJoinPorts (graph/stage.hpp).
inline constexpr int kMaxJoinPorts = 10;

struct NodeDesc {
  std::string name;
  std::string type;
  std::string description;         // the kind's one-line description
  NodeKind kind = NodeKind::function;
  int replicas = 1;
  bool compute = false;            // the kind's, for the report (NodeSpec::compute)
  std::string when_bound;          // the kind's, for the report (NodeSpec::when_bound)
  const NodeSpec* spec = nullptr;  // owned by the registry; used only while building
  std::vector<PortSpec> inputs;    // as declared, "*" replaced by the type the graph gives it
  std::vector<PortSpec> outputs;
  std::vector<char> input_connected;
  std::vector<char> output_connected;
  int join_ports = 0;              // inputs + output credits (+ the ticket of a source)
  YAML::Node params;
  std::string key_path;            // "pipeline.nodes[3]"
  SourceMark mark;
  SourceMark params_mark;
  std::shared_ptr<const config::Origins> origins;
};

struct EdgeDesc {
  std::string name;  // "from.port->to.port"
  int from_node = -1, from_port = -1, to_node = -1, to_port = -1;
  int capacity = 1;         // as declared; per consumer replica when the consumer is replicated
  bool token = false;       // closes a token cycle
  int initial = 0;          // tokens placed at start
  bool routed = false;      // from a router: one edge of `capacity` per consumer replica
  bool ordered = false;     // into an ordered port (sequencer buffer)
  // The node whose join takes this edge's credits: the producer, except for
  // an ordered edge behind a fan-out, whose credits the fan-out takes (see
  // graph/builder.cpp: otherwise a later seq could fill the ordered edge while
  // an earlier one still waits in a busy replica's queue: deadlock).
  int credit_taker = -1;
  int carried_by = -1;      // for such an edge: the fan-out's edge that carries the credit
  std::string type;         // type name carried ("*" when nothing fixes it)
  std::string key_path;     // "pipeline.edges[4]"
  SourceMark mark;
};

struct GraphDescription {
  std::vector<NodeDesc> nodes;
  std::vector<EdgeDesc> edges;
  int node_index(std::string_view name) const;  // -1 when absent
};

// Validates the declaration against the registry; throws dflow::ConfigError
// with file:line:col, the key path and, for names, the closest known one.
GraphDescription describe(const config::PipelineConfig& pipeline, const NodeRegistry& registry);

// Checks on the resolved structure (graph/describe_rules.cpp), called by describe().
void check_structure(GraphDescription& graph);
void resolve_types(GraphDescription& graph);
void check_cycles(const GraphDescription& graph);
void assign_credit_takers(GraphDescription& graph);

}  // namespace dflow::graph
