#pragma once
// The eval.tau node's held-out prompts, read and checked when the run context
// is built, before the graph (a node factory that throws would leave a
// half-built graph): the prompts of eval.prompts, without those that are
// also training prompts, at most eval.max_prompts. Throws ConfigError naming
// the node, the key and the file.
#include <cstdint>
#include <string>
#include <vector>

namespace dflow::data {
class Dataset;
}

namespace dflow::nodes {

class RunContext;

std::vector<std::vector<int64_t>> held_out_prompts(const RunContext& run, const std::string& node);

// What training_prompts() read of the dataset.
struct PromptScanStats {
  int64_t ids_read = 0;
  int64_t mask_bytes_read = 0;
};

// For each of `prompts`: is it the prompt (the tokens before the first
// trained one) of some sample of `dataset`?
std::vector<bool> training_prompts(const data::Dataset& dataset, const std::vector<std::vector<int64_t>>& prompts,
                                   PromptScanStats* stats = nullptr);

}  // namespace dflow::nodes
