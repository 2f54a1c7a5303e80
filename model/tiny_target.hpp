// A small random Qwen3 model in Hugging Face layout, for demos and tests.
#pragma once

#include <cstdint>
#include <filesystem>

#include "model/hf_config.hpp"

namespace dflow::model {

struct TinyTargetOptions {
  std::filesystem::path out_dir;
  int64_t num_layers = 4;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t intermediate_size = 128;
  int64_t vocab_size = 512;
  int64_t max_position_embeddings = 4096;
  double rope_theta = 10000.0;
  uint64_t seed = 0;
};

// Writes out_dir/config.json and out_dir/model.safetensors (float32) and
// returns the parsed config. The last vocabulary id is reserved as the mask
// token (`dflow_mask_token_id`) and the one before it as eos. Weights are
// drawn so that next-token distributions are peaked: greedy generation
// wanders through many tokens instead of repeating one, and the
// continuations are learnable. Same options, same bytes.
HFConfig make_tiny_target(const TinyTargetOptions& options);

}  // namespace dflow::model
