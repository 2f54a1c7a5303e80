#pragma once
// The embedded default run needs a target and data: when absent, create a
// tiny Qwen3-architecture target with a learnable pattern ("echo", see
// target/tiny_target.hpp), a dataset of synthetic prompts whose responses the
// tiny target regenerates itself (as DFlash data is made), and held-out
// prompts for evaluation that are not among the training prompts.
#include "config/config.hpp"

namespace dflow::train {

struct DemoDataOptions {
  int64_t num_prompts = 1200;
  int64_t min_prompt_tokens = 16;  // at least the echo lag: every response token echoes a prompt token
  int64_t max_prompt_tokens = 48;
  int64_t max_new_tokens = 96;
  int64_t heldout_prompts = 64;
};

// Creates config.model.target.path, config.data.train[0] and (when set)
// config.eval.prompts when they do not exist yet; leaves existing ones alone.
void ensure_demo_assets(const config::Config& config, const DemoDataOptions& options = {});

}  // namespace dflow::train
