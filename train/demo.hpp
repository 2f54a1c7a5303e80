#pragma once
// The embedded default run needs a target and data: when absent, create a
// tiny Qwen3-architecture target and a dataset of synthetic prompts whose
// responses the tiny target regenerates itself (as DFlash data is made).
#include "config/config.hpp"

namespace dflow::train {

struct DemoDataOptions {
  int64_t num_prompts = 1200;
  int64_t min_prompt_tokens = 8;
  int64_t max_prompt_tokens = 48;
  int64_t max_new_tokens = 96;
};

// Creates config.model.target.path and config.data.train[0] when they do not
// exist yet; leaves existing ones alone.
void ensure_demo_assets(const config::Config& config, const DemoDataOptions& options = {});

}  // namespace dflow::train
