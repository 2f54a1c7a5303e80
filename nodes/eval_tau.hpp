#pragma once
// The eval.tau node's held-out prompts, read and checked by the trainer
// before the graph is built (a node factory that throws would leave a
// half-built graph): the prompts of eval.prompts, without those that are
// also training prompts, at most eval.max_prompts. Throws ConfigError naming
// the node, the key and the file.
#include <cstdint>
#include <string>
#include <vector>

#include "nodes/run_state.hpp"

namespace dflow::nodes {

std::vector<std::vector<int64_t>> held_out_prompts(const RunState& state, const std::string& node);

}  // namespace dflow::nodes
