#pragma once
// The drafter's heads as its config declares them, before any model loads:
// what a run builds (nodes/run_context.cpp) and what `dflow init` sizes.
#include <string>

#include "config/config.hpp"
#include "model/drafter.hpp"

namespace dflow::graph {
class NodeRegistry;
}

namespace dflow::nodes {

// The DSpark heads the drafter node's params add (RunHooks::drafter_heads),
// none without such a node; and who needs the target's last hidden state
// (RunHooks::teacher), in `teacher_because`. Bad params are a ConfigError
// naming the node.
model::DraftHeads drafter_heads(const config::Config& config, const graph::NodeRegistry& kinds,
                                std::string* teacher_because);

}  // namespace dflow::nodes
