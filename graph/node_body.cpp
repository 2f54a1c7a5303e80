#include "graph/node_body.hpp"

#include <stdexcept>

namespace dflow::graph {

namespace {
std::string port_list(const std::vector<PortSpec>& ports) {
  std::string out;
  for (const auto& p : ports) out += (out.empty() ? "" : ", ") + p.name;
  return out.empty() ? "none" : out;
}

size_t index_of(const std::vector<PortSpec>& ports, std::string_view port, const char* side) {
  for (size_t i = 0; i < ports.size(); ++i)
    if (ports[i].name == port) return i;
  throw std::logic_error("no " + std::string(side) + " port '" + std::string(port) + "' (ports: " + port_list(ports) + ")");
}
}  // namespace

const char* kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::source: return "source";
    case NodeKind::function: return "function";
    case NodeKind::router: return "router";
  }
  return "?";
}

Message& Inputs::operator[](size_t port_index) {
  if (port_index >= ports_->size()) throw std::logic_error("input port index " + std::to_string(port_index) + " out of range");
  if (!connected_[port_index])
    throw std::logic_error("input port '" + (*ports_)[port_index].name + "' is not connected (check has() first)");
  return items_[port_index];
}

Message& Inputs::at(std::string_view port) { return (*this)[index_of(*ports_, port, "input")]; }

bool Inputs::has(std::string_view port) const { return connected_[index_of(*ports_, port, "input")]; }

void Emitter::emit(size_t port_index, Message message) {
  if (port_index >= ports_->size()) throw std::logic_error("output port index " + std::to_string(port_index) + " out of range");
  if (slots_[port_index])
    throw std::logic_error("emitted twice on output port '" + (*ports_)[port_index].name +
                           "' in one call; an output carries at most one message per call");
  slots_[port_index] = std::move(message);
}

void Emitter::emit(std::string_view port, Message message) { emit(index_of(*ports_, port, "output"), std::move(message)); }

void Emitter::emit(Message message) {
  if (ports_->size() != 1)
    throw std::logic_error("emit(message) needs exactly one output port; this node has: " + port_list(*ports_));
  emit(size_t{0}, std::move(message));
}

bool Emitter::connected(std::string_view port) const { return connected_[index_of(*ports_, port, "output")]; }

}  // namespace dflow::graph
