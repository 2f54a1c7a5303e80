#pragma once
// How a node kind declares its ports. Port types are names ("PaddedBatch",
// "ModelToken") checked when the graph is built, never when it runs.
#include <string>

namespace dflow::graph {

// "*" on an input takes any type; on an output it is "the type that arrives
// on this node's only input" (reorder, pass-through).
inline constexpr const char* kAnyType = "*";

struct PortSpec {
  std::string name = {};
  std::string type = {};
  bool ordered = false;   // input: restore sequence order (sequencer buffer keyed by seq)
  bool routed = false;    // router output: one edge per replica of the consumer
  bool optional = false;  // may be left unconnected (emissions on it are then dropped)
};

enum class NodeKind { source, function, router };

const char* kind_name(NodeKind kind);

}  // namespace dflow::graph
