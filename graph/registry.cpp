#include "graph/registry.hpp"

#include <set>
#include <stdexcept>

namespace dflow::graph {

namespace {
void check_ports(const NodeSpec& spec, const std::vector<PortSpec>& ports, const char* side) {
  std::set<std::string> seen;
  for (const auto& p : ports) {
    auto where = "node type '" + spec.type + "' " + side + " port '" + p.name + "'";
    if (p.name.empty() || p.name.find('.') != std::string::npos)
      throw std::logic_error(where + ": a port name is non-empty and has no '.'");
    if (!seen.insert(p.name).second) throw std::logic_error(where + ": declared twice");
    if (p.type.empty()) throw std::logic_error(where + ": needs a type name (or \"*\")");
  }
}

void check_spec(const NodeSpec& spec) {
  auto fail = [&](const std::string& why) { throw std::logic_error("node type '" + spec.type + "': " + why); };
  if (spec.type.empty()) throw std::logic_error("a node type needs a name");
  if (!spec.make) fail("no factory (make)");
  check_ports(spec, spec.inputs, "input");
  check_ports(spec, spec.outputs, "output");
  for (const auto& p : spec.inputs)
    if (p.routed) fail("input '" + p.name + "' is marked routed; only router outputs are routed");
  for (const auto& p : spec.outputs)
    if (p.ordered) fail("output '" + p.name + "' is marked ordered; only inputs are ordered");
  switch (spec.kind) {
    case NodeKind::source:
      if (!spec.inputs.empty()) fail("a source has no inputs");
      if (spec.outputs.empty()) fail("a source needs an output");
      break;
    case NodeKind::router:
      if (spec.inputs.size() != 1 || spec.outputs.size() != 1 || !spec.outputs[0].routed)
        fail("a router has exactly one input and one routed output");
      if (spec.inputs[0].ordered) fail("a router's input cannot be ordered");
      break;
    case NodeKind::function:
      if (spec.inputs.empty()) fail("a function node needs an input (a node without inputs is a source)");
      for (const auto& p : spec.outputs)
        if (p.routed) fail("output '" + p.name + "' is routed; only a router has routed outputs");
      break;
  }
}
}  // namespace

void NodeRegistry::add(NodeSpec spec) {
  check_spec(spec);
  if (specs_.count(spec.type)) throw std::logic_error("node type '" + spec.type + "' is registered twice");
  auto key = spec.type;
  specs_.emplace(std::move(key), std::move(spec));
}

const NodeSpec* NodeRegistry::find(std::string_view type) const {
  auto it = specs_.find(type);
  return it == specs_.end() ? nullptr : &it->second;
}

std::vector<std::string> NodeRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [type, spec] : specs_) out.push_back(type);
  return out;
}

}  // namespace dflow::graph
