#pragma once
// What a node kind implements: pure user code. A body never builds queues or
// threads; its shell (graph/node_shell.hpp) holds the credits, times the call,
// and turns an exception into a named, cancelling NodeError.
#include <any>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "config/yaml_reader.hpp"
#include "graph/message.hpp"
#include "graph/ports.hpp"

namespace dflow::graph {

class TelemetryBoard;
class NodeMeter;

// The messages of one firing, one per connected input port.
class Inputs {
 public:
  Inputs(const std::vector<PortSpec>& ports, std::span<Message> items, std::span<const char> connected)
      : ports_(&ports), items_(items), connected_(connected) {}
  size_t size() const { return ports_->size(); }
  Message& operator[](size_t port_index);
  Message& at(std::string_view port);
  bool has(std::string_view port) const;  // false for an optional port left unconnected
  template <class T>
  T& get(std::string_view port) { return payload<T>(at(port)); }
  template <class T>
  T& get(size_t port_index) { return payload<T>((*this)[port_index]); }

 private:
  const std::vector<PortSpec>* ports_;
  std::span<Message> items_;
  std::span<const char> connected_;
};

// Where a body puts its results: at most one message per output port per call
// (each output edge lent exactly one credit for this call).
class Emitter {
 public:
  Emitter(const std::vector<PortSpec>& ports, std::span<std::optional<Message>> slots, std::span<const char> connected)
      : ports_(&ports), slots_(slots), connected_(connected) {}
  void emit(size_t port_index, Message message);
  void emit(std::string_view port, Message message);
  void emit(Message message);  // the node's only output port
  bool connected(std::string_view port) const;

 private:
  const std::vector<PortSpec>* ports_;
  std::span<std::optional<Message>> slots_;
  std::span<const char> connected_;
};

class NodeBody {
 public:
  virtual ~NodeBody() = default;
};

// kind: source. Emits the next item(s); returns false when exhausted (what it
// emitted in that last call is still delivered).
class SourceBody : public NodeBody {
 public:
  virtual bool next(Emitter& out) = 0;
};

// kind: function. Called once per firing, serially per replica.
class FunctionBody : public NodeBody {
 public:
  virtual void process(Inputs& in, Emitter& out) = 0;
};

// Cost the router sees for a replica whose edge is full: it cannot take more.
inline constexpr uint64_t kReplicaFull = UINT64_MAX;

// kind: router. Picks the replica for `message`; outstanding_cost[r] = sum of
// `cost` queued on replica r's edge plus the one it is processing, or
// kReplicaFull. Choosing a full replica falls back to the least loaded one.
class RouterBody : public NodeBody {
 public:
  virtual size_t choose(const Message& message, std::span<const uint64_t> outstanding_cost) = 0;
};

// Everything a factory gets to build one replica of a node. Valid during the
// factory call only: a body keeps copies of what it needs (stop, telemetry).
// A body that may block (waiting on a device, a file) should wake on `stop`,
// or a failure elsewhere cannot end the run until it returns.
struct NodeContext {
  std::string name;             // node name from the YAML
  std::string type;             // registry key, e.g. "route.least_loaded"
  int replica = 0;              // 0 .. replicas-1
  int replicas = 1;
  config::YamlSection params;   // already validated by NodeSpec::check_params
  std::any user;                // run state (defined in nodes/); hold a pointer or shared_ptr in it
  std::stop_token stop;         // requested when the pipeline is cancelled or a node failed
  const TelemetryBoard* telemetry = nullptr;  // live edge/node telemetry (for the metrics node)
  NodeMeter* meter = nullptr;  // this replica's own meter: a body that waits outside the graph reports it there

  template <class T>
  T user_as() const { return std::any_cast<T>(user); }
};

}  // namespace dflow::graph
