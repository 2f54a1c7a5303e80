// A small target model in Hugging Face layout, for demos and tests: random
// weights, or weights with a structure a drafter can learn ("echo"), in one
// of the architectures dflow runs: dense Qwen3, Qwen3-MoE, gpt-oss, or the
// text model of a Qwen3.5/3.6 multimodal wrapper (dense or MoE; random
// only). The checkpoint is what the published checkpoints hold (config.json
// keys and tensor names), so transformers reads it as it reads theirs.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "target/hf_config.hpp"

namespace dflow::target {

struct TinyTargetOptions {
  std::filesystem::path out_dir;
  // "qwen3" (Qwen3ForCausalLM), "qwen3_moe" (Qwen3MoeForCausalLM),
  // "gpt_oss" (GptOssForCausalLM), "qwen3_5" (Qwen3_5ForConditionalGeneration)
  // or "qwen3_5_moe" (Qwen3_5MoeForConditionalGeneration); see
  // tiny_target_architectures().
  std::string arch = "qwen3";
  int64_t num_layers = 4;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 0;  // 0: hidden_size / num_heads (Qwen3 models give it explicitly: 128)
  int64_t intermediate_size = 128;
  int64_t vocab_size = 512;
  int64_t max_position_embeddings = 4096;
  double rope_theta = 0.0;  // 0: the architecture's (10000 for the tiny Qwen3s, 150000 for gpt-oss as published)
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
  // (qwen3_5 and qwen3_5_moe: random only.)
  // "echo": a low-entropy, learnable target for the demo: one attention head
  // of layer 0 looks back exactly `echo_lag` - 1 positions, so the greedy
  // continuation is token[t] = perm(token[t - echo_lag]) for a fixed
  // permutation of the vocabulary; the other layers add small random
  // perturbations. A prompt of at least echo_lag tokens is continued by
  // echoing its last echo_lag tokens through the permutation, over and over.
  std::string pattern = "random";
  int64_t echo_lag = 16;

  // Routed experts (qwen3_moe, gpt_oss, qwen3_5_moe). The echo pattern keeps
  // their output small (as it keeps the dense MLP's), so the echo survives routing.
  int64_t num_experts = 8;           // qwen3_moe num_experts, gpt_oss num_local_experts
  int64_t experts_per_token = 2;     // num_experts_per_tok (gpt_oss also experts_per_token)
  int64_t moe_intermediate_size = 64;  // qwen3_moe's and qwen3_5_moe's experts (gpt_oss's use intermediate_size)
  int64_t shared_expert_intermediate_size = 64;  // qwen3_5_moe: the sigmoid-gated shared expert beside them
  bool norm_topk_prob = true;        // qwen3_moe
  // qwen3_moe: layer i has experts when (i + 1) % decoder_sparse_step == 0
  // and i is not in mlp_only_layers; the others the dense MLP.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // gpt_oss: layer_types alternate sliding_attention (even layers, as
  // published) and full_attention; the sliding layers see this many tokens,
  // themselves included. The echo pattern needs it >= echo_lag (its head is
  // in layer 0, a sliding layer).
  int64_t sliding_window = 32;
  double swiglu_limit = 7.0;
  // gpt_oss: the experts' projections in MXFP4 as the published checkpoints
  // hold them (*_blocks: FP4 e2m1 pairs in a byte, low nibble first, 32
  // values a block along the input; *_scales: a power of two per block,
  // biased by 127; config quantization_config quant_method mxfp4), each
  // block scaled so its largest value fits 6 and rounded to the nearest
  // FP4 value. Needs hidden_size and intermediate_size multiples of 32.
  bool mxfp4 = false;

  // qwen3_5, qwen3_5_moe: each layer's kind in layer_types,
  // "linear_attention" (Gated DeltaNet) or "full_attention" (attention with
  // an output gate and partial rotary); empty: every
  // full_attention_interval-th layer full, the others linear, as the
  // published models (transformers' default, 4). config.json lists them.
  std::vector<std::string> layer_types;
  int64_t full_attention_interval = 4;
  // Gated DeltaNet: q and k heads, v heads (a multiple of them: each key
  // head serves a group), their widths, and the causal depthwise conv's
  // kernel over q, k and v.
  int64_t linear_num_key_heads = 2;
  int64_t linear_num_value_heads = 4;
  int64_t linear_key_head_dim = 16;
  int64_t linear_value_head_dim = 16;
  int64_t linear_conv_kernel = 4;
  // The full-attention layers rotate int(head_dim x this) dims of each head.
  double partial_rotary_factor = 0.25;
};

// The architectures make_tiny_target writes: qwen3, qwen3_moe, gpt_oss,
// qwen3_5, qwen3_5_moe.
const std::vector<std::string>& tiny_target_architectures();

// Writes out_dir/config.json and out_dir/model.safetensors (or shards and an
// index, see max_shard_bytes) and returns the parsed config. Unless given,
// the last vocabulary id is reserved as the mask token (`dflow_mask_token_id`)
// and the one before it as eos. Random weights
// are drawn so that next-token distributions are peaked: greedy generation
// wanders through many tokens instead of repeating one. Same options, same
// bytes.
HFConfig make_tiny_target(const TinyTargetOptions& options);

// Random weights in the shapes of a real model, vocabulary included:
// "qwen3-0.6b" (28 layers, hidden 1024, 16/8 heads, head_dim 128, FFN 3072,
// tied embeddings), "qwen3-8b" (36 layers, hidden 4096, 32/8 heads,
// head_dim 128, FFN 12288, untied, rope_theta 1e6), "qwen3-30b-a3b"
// (Qwen3-MoE: 48 layers, hidden 2048, 32/4 heads, head_dim 128, 128 experts
// top-8 of 768, norm_topk_prob, untied, rope_theta 1e6; ~61 GB) with vocab
// 151936, mask token 151669 (the recipe's added <|MASK|> row) and eos 151645
// (<|im_end|>); and "gpt-oss-20b" (24 layers, hidden 2880, 64/8 heads,
// head_dim 64, 32 experts top-4 of 2880, sliding window 128, YaRN; vocab
// 201088, eos 200002 <|return|>, mask 201087, a reserved id; ~42 GB, the
// experts in bfloat16, not MXFP4); and "qwen3.5-35b-a3b" (Qwen3.5-MoE's
// text model: 40 layers, three Gated DeltaNet layers to one full, hidden
// 2048, 16/2 heads of 256 rotating a quarter, linear 16 key heads and 32
// value heads of 128, conv 4, 256 experts top-8 of 512 and a shared expert
// of 512, untied, rope_theta 1e7; vocab 248320, eos 248044, mask 248319;
// ~70 GB). All bfloat16, in shards of at most
// 512 MiB (a larger tensor gets a shard of its own), so even the 1.2 GB of
// the 0.6B preset goes through the index; drawn and written a tensor at a
// time. Keeps out_dir, seed, generate_on of `base`; throws naming the
// presets when unknown.
TinyTargetOptions preset_target_options(const std::string& preset, TinyTargetOptions base = {});
// The config such a model has, without making one: a real model's shapes for
// what needs only them (the drafter's memory model, benchmarks).
HFConfig tiny_target_config(const TinyTargetOptions& options);
const std::vector<std::string>& target_presets();

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;
// The weights of each pattern (target/tiny_target_random.cpp, target/tiny_target_echo.cpp).
// The random pattern hands each tensor to `add` as soon as it is drawn (in
// the checkpoint's order), so a writer can put it on disk before the next.
using TensorSink = std::function<void(std::string name, torch::Tensor tensor)>;
void random_tiny_weights(const TinyTargetOptions& options, const HFConfig& config, const TensorSink& add);
NamedTensorList echo_tiny_weights(const TinyTargetOptions& options, const HFConfig& config);

}  // namespace dflow::target
