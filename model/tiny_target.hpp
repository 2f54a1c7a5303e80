// A small Qwen3 model in Hugging Face layout, for demos and tests: random
// weights, or weights with a structure a drafter can learn ("echo").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
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
  int64_t head_dim = 0;  // 0: hidden_size / num_heads (Qwen3 models give it explicitly: 128)
  int64_t intermediate_size = 128;
  int64_t vocab_size = 512;
  int64_t max_position_embeddings = 4096;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;  // no lm_head.weight: the embedding is the head
  // Special ids; -1: the last vocabulary id is the mask token, the one before it eos.
  int64_t mask_token_id = -1;
  int64_t eos_token_id = -1;
  torch::Dtype dtype = torch::kFloat32;  // of the written weights (float32 or bfloat16)
  // Shards of at most this many bytes (whole tensors), listed in
  // model.safetensors.index.json as Hugging Face writes them; 0: one
  // model.safetensors.
  int64_t max_shard_bytes = 0;
  // Where the random weights are drawn: CUDA draws a Qwen3-8B-sized model in
  // seconds (the bytes then differ from a CPU draw with the same seed).
  torch::Device generate_on = torch::kCPU;
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

// Writes out_dir/config.json and out_dir/model.safetensors (or shards and an
// index, see max_shard_bytes) and returns the parsed config. Unless given,
// the last vocabulary id is reserved as the mask token (`dflow_mask_token_id`)
// and the one before it as eos. Random weights
// are drawn so that next-token distributions are peaked: greedy generation
// wanders through many tokens instead of repeating one. Same options, same
// bytes.
HFConfig make_tiny_target(const TinyTargetOptions& options);

// Random weights in the shapes of a real model, vocabulary included (151936):
// "qwen3-0.6b" (28 layers, hidden 1024, 16/8 heads, head_dim 128, FFN 3072,
// tied embeddings) and "qwen3-8b" (36 layers, hidden 4096, 32/8 heads,
// head_dim 128, FFN 12288, untied, rope_theta 1e6). Mask token 151669 (the
// recipe's added <|MASK|> row), eos 151645 (<|im_end|>), bfloat16, in shards
// of at most 512 MiB (a larger tensor gets a shard of its own), so even the
// 1.2 GB of the 0.6B preset goes through the index. Keeps out_dir, seed,
// generate_on of `base`; throws naming the presets when unknown.
TinyTargetOptions preset_target_options(const std::string& preset, TinyTargetOptions base = {});
// The config such a model has, without making one: a real model's shapes for
// what needs only them (the drafter's memory model, benchmarks).
HFConfig tiny_target_config(const TinyTargetOptions& options);
const std::vector<std::string>& target_presets();

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;
// The weights of each pattern (model/tiny_target.cpp, model/tiny_target_echo.cpp).
// The random pattern hands each tensor to `add` as soon as it is drawn (in
// the checkpoint's order), so a writer can put it on disk before the next.
using TensorSink = std::function<void(std::string name, torch::Tensor tensor)>;
void random_tiny_weights(const TinyTargetOptions& options, const HFConfig& config, const TensorSink& add);
NamedTensorList echo_tiny_weights(const TinyTargetOptions& options, const HFConfig& config);

}  // namespace dflow::model
