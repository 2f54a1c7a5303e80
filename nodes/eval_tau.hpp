#pragma once
// The eval.tau node's settings and held-out prompts, read and checked when
// the run context is built, before the graph (a node factory that throws
// would leave a half-built graph): the prompts of its prompts file, without
// those that are also training prompts, at most max_prompts. Throws
// ConfigError naming the node, the key and the file.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "config/yaml_reader.hpp"

namespace dflow::data {
class Dataset;
}

namespace dflow::nodes {

class RunContext;

// An eval node's settings: its params, each defaulting to the run's `eval:`
// section (so the default pipeline's node is set there). eval.every_steps
// stays the run's: it is when optimizer_step emits the snapshots.
struct EvalSettings {
  std::string prompts;
  int max_prompts = 16;
  int max_new_tokens = 64;
  double temperature = 0.0;
  uint64_t seed = 0;
};
EvalSettings read_eval_settings(const config::EvalConfig& defaults, config::YamlSection& params);
// Its params as `dflow nodes` lists them, each defaulting to the run config's default for eval:.
std::vector<config::KeyDoc> eval_params();

std::vector<std::vector<int64_t>> held_out_prompts(const RunContext& run, const std::string& node,
                                                   const EvalSettings& settings);
// What the eval node's kind prepares (RunContext::prepared).
struct PreparedEval {
  EvalSettings settings;
  std::vector<std::vector<int64_t>> prompts;
};

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
