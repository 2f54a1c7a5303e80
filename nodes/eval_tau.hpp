#pragma once
// The eval.tau node's held-out prompts, read and checked when the run context
// is built, before the graph (a node factory that throws would leave a
// half-built graph): the prompts of eval.prompts, without those that are
// also training prompts, at most eval.max_prompts. Throws ConfigError naming
// the node, the key and the file.
#include <cstdint>
#include <string>
#include <vector>

namespace dflow::nodes {

class RunContext;

std::vector<std::vector<int64_t>> held_out_prompts(const RunContext& run, const std::string& node);

}  // namespace dflow::nodes
