// A small Qwen3 model in Hugging Face layout, for demos and tests: random
// weights, or weights with a structure a drafter can learn ("echo").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

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
  // "random": peaked but patternless continuations (tests of the model code).
  // "echo": a low-entropy, learnable target for the demo: one attention head
  // of layer 0 looks back exactly `echo_lag` - 1 positions, so the greedy
  // continuation is token[t] = perm(token[t - echo_lag]) for a fixed
  // permutation of the vocabulary; the other layers add small random
  // perturbations. A prompt of at least echo_lag tokens is continued by
  // echoing its last echo_lag tokens through the permutation, over and over.
  std::string pattern = "random";
  int64_t echo_lag = 16;
};

// Writes out_dir/config.json and out_dir/model.safetensors (float32) and
// returns the parsed config. The last vocabulary id is reserved as the mask
// token (`dflow_mask_token_id`) and the one before it as eos. Random weights
// are drawn so that next-token distributions are peaked: greedy generation
// wanders through many tokens instead of repeating one. Same options, same
// bytes.
HFConfig make_tiny_target(const TinyTargetOptions& options);

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;
// The weights of each pattern (model/tiny_target.cpp, model/tiny_target_echo.cpp).
NamedTensorList random_tiny_weights(const TinyTargetOptions& options, const HFConfig& config);
NamedTensorList echo_tiny_weights(const TinyTargetOptions& options, const HFConfig& config);

}  // namespace dflow::model
