#include "graph/builtin_nodes.hpp"

namespace dflow::graph {

namespace {
// The ordered input buffer does the reordering; the body only forwards.
class Forward final : public FunctionBody {
 public:
  void process(Inputs& in, Emitter& out) override { out.emit(std::move(in[0])); }
};
}  // namespace

void register_graph_nodes(NodeRegistry& registry) {
  registry.add({.type = "reorder",
                .description = "restores sequence order (seq) after parallel replicas",
                .kind = NodeKind::function,
                .inputs = {{.name = "in", .type = kAnyType, .ordered = true}},
                .outputs = {{.name = "out", .type = kAnyType}},
                .make = [](NodeContext&) { return std::make_unique<Forward>(); }});
  registry.add({.type = "pass",
                .description = "forwards every message unchanged",
                .kind = NodeKind::function,
                .inputs = {{.name = "in", .type = kAnyType}},
                .outputs = {{.name = "out", .type = kAnyType}},
                .make = [](NodeContext&) { return std::make_unique<Forward>(); }});
}

}  // namespace dflow::graph
