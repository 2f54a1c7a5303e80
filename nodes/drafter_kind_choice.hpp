#pragma once
// The drafter's kind as its config declares it, before any model loads:
// what a run builds (nodes/run_context.cpp) and what `dflow init` sizes.
#include <string>

#include "config/config.hpp"
#include "nodes/node_kind.hpp"

namespace dflow::graph {
class NodeRegistry;
}

namespace dflow::nodes {

// The drafter kind and fields the drafter node's params choose
// (RunHooks::drafter_kind), plain DFlash without such a node; and who needs
// the target's last hidden state (RunHooks::teacher), in `teacher_because`.
// Bad params are a ConfigError naming the node.
DrafterKindChoice drafter_kind_choice(const config::Config& config, const graph::NodeRegistry& kinds,
                                      std::string* teacher_because);

}  // namespace dflow::nodes
