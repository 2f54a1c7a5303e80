// Internal to model/: what the tiny target's config writer and its two
// weight patterns share (target/tiny_target_config.cpp, tiny_target_random.cpp,
// tiny_target_echo.cpp, tiny_target_qwen3_5.cpp): the architecture's layout
// rules as Hugging Face states them, and one layer's MLP tensors under their
// published names.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "target/tiny_target.hpp"

namespace dflow::target::tiny {

int64_t head_dim_of(const TinyTargetOptions& o);
double rope_theta_of(const TinyTargetOptions& o);
bool has_experts(const TinyTargetOptions& o);
// qwen3_moe: (layer + 1) % decoder_sparse_step == 0 and not in mlp_only_layers
// (Qwen3MoeDecoderLayer); gpt_oss, qwen3_5_moe: every layer.
bool sparse_layer(const TinyTargetOptions& o, int64_t layer);
// gpt_oss: the even layers are sliding_attention, as in the published configs.
bool sliding_layer(const TinyTargetOptions& o, int64_t layer);
// gpt_oss's YaRN rope_scaling (the published values).
constexpr double kYarnFactor = 32.0;
constexpr int64_t kYarnOriginalMaxPositions = 4096;
constexpr double kYarnBetaFast = 32.0, kYarnBetaSlow = 1.0;
// The rotary inverse frequencies transformers computes for this config
// (head_dim / 2 of them): theta^(-2i/d), or YaRN's blend of interpolated
// and extrapolated ones for gpt_oss (modeling_rope_utils, truncate false).
std::vector<double> rotary_inverse_frequencies(const TinyTargetOptions& o);

// config.json as the published checkpoints of the architecture write it.
nlohmann::json config_json(const TinyTargetOptions& o);
void check_options(const TinyTargetOptions& o);

// Qwen3.5/3.6 (target/tiny_target_qwen3_5.cpp): qwen3_5 or qwen3_5_moe; the
// layer kinds written (TinyTargetOptions::layer_types or the interval's);
// the wrapper's config.json; the refusals of what it cannot write.
bool qwen3_5_arch(const TinyTargetOptions& o);
std::vector<std::string> qwen3_5_layer_types(const TinyTargetOptions& o);
nlohmann::json qwen3_5_config_json(const TinyTargetOptions& o);
void check_qwen3_5_options(const TinyTargetOptions& o);

using Normal = std::function<torch::Tensor(std::vector<int64_t> shape, double std_dev)>;
using Uniform = std::function<torch::Tensor(std::vector<int64_t> shape, double low, double high)>;
using Sink = std::function<void(std::string name, torch::Tensor tensor)>;
// One layer's MLP under `prefix` ("model.layers.<i>."): the dense SwiGLU,
// Qwen3-MoE's router and per-expert projections, or gpt-oss's router (with
// bias) and stacked, interleaved experts with biases. Input projections are
// drawn by `normal` at 1/sqrt(fan_in); output projections (and their
// biases) by `output_normal` at output_scale / sqrt(fan_in): 1 for the
// random pattern, small or 0 for the echo pattern's layers.
void add_mlp(const TinyTargetOptions& o, int64_t layer, const std::string& prefix, const Normal& normal,
             const Normal& output_normal, double output_scale, const Sink& add);

// A Qwen3.5 text model's decoder layers under `prefix`
// ("model.language_model."): each its layer_types kind's attention, the
// zero-centred norms and add_mlp's MLP (random pattern).
void add_qwen3_5_layers(const TinyTargetOptions& o, const std::string& prefix, const Normal& normal,
                        const Uniform& uniform, const Sink& add);

// gpt-oss's MXFP4 of stacked expert weights [E, in, out] (TinyTargetOptions::mxfp4):
// blocks [E, out, in / 32, 16] and scales [E, out, in / 32], both uint8.
std::pair<torch::Tensor, torch::Tensor> mxfp4_quantize(const torch::Tensor& weight);

}  // namespace dflow::target::tiny
