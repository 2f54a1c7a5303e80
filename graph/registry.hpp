#pragma once
// Node kinds by YAML `type`. A kind declares its ports (with type names), how
// to validate its params, and how to build one replica's body. Real nodes are
// registered from nodes/ (register_all_nodes()); graph/ registers only the
// generic ones (graph/builtin_nodes.hpp).
#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/keys.hpp"
#include "config/yaml_reader.hpp"
#include "graph/node_body.hpp"
#include "graph/ports.hpp"

namespace dflow::graph {

struct NodeSpec {
  // Every member has a default so that designated initializers may omit any
  // (GCC's -Wmissing-field-initializers stays quiet for defaulted members).
  std::string type = {};         // registry key and YAML `type`, e.g. "route.least_loaded"
  std::string description = {};  // one line, shown by exports
  NodeKind kind = NodeKind::function;
  std::vector<PortSpec> inputs = {};
  std::vector<PortSpec> outputs = {};
  // Reads every accepted key (and checks values); the builder then refuses
  // any key it did not read, with a suggestion. Empty: the node takes no params.
  std::function<void(config::YamlSection& params)> check_params = {};
  // The params check_params reads, as `dflow nodes` lists them: the docs of
  // the KeySet that reads them (config::KeySet::docs). Empty: none.
  std::vector<config::KeyDoc> params = {};
  // Builds one replica's body: a SourceBody, FunctionBody or RouterBody per `kind`.
  std::function<std::unique_ptr<NodeBody>(NodeContext& context)> make = {};
  // A firing of this kind runs before queued normal work as soon as a graph
  // thread finishes its current task (oneTBB node priority). For nodes off
  // the training loop whose work otherwise waits behind it without bound,
  // such as evaluation on a machine with as many threads as the loop keeps
  // busy; such a node then takes one thread while it runs.
  bool high_priority = false;
  // For the report's reading of a run this node bounds (graph/ never reads
  // them; the description carries them into graph.json). compute: its work
  // is the compute the performance model expects to bound a run (a model's
  // forward, a training step), behind which the rest of the graph hides.
  bool compute = false;
  // What its busy time is and what to do when it bounds a run, in words
  // ("" leaves the report's own words for a compute or other node).
  std::string when_bound = {};
  // What the application attaches to the kind beyond the graph; graph/ never
  // reads it (the training nodes keep their run hooks here: nodes/node_kind.hpp).
  std::any extension = {};
};

class NodeRegistry {
 public:
  // Throws std::logic_error for a duplicate type or an inconsistent spec
  // (a source with inputs, a router without exactly one routed output, ...).
  void add(NodeSpec spec);
  const NodeSpec* find(std::string_view type) const;  // nullptr when unknown
  std::vector<std::string> types() const;             // sorted

 private:
  std::map<std::string, NodeSpec, std::less<>> specs_;
};

}  // namespace dflow::graph
