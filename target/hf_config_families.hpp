// The family-specific part of config.json parsing (target/hf_config.cpp calls
// these after reading the keys every decoder has): what a family adds, and
// the refusal of every key of it that dflow does not implement, naming the
// key and its value. Internal to model/.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "target/hf_config.hpp"

namespace dflow::target::config_parse {

std::runtime_error config_error(const std::string& source, const std::string& what);
int64_t required_int(const nlohmann::json& json, const std::string& key, const std::string& source);
int64_t optional_int(const nlohmann::json& json, const std::string& key, int64_t fallback);
double optional_number(const nlohmann::json& json, const std::string& key, double fallback);
bool optional_bool(const nlohmann::json& json, const std::string& key, bool fallback);
// rope_theta, and the refusal of any rope scaling (the dense families).
void read_plain_rope(const nlohmann::json& json, HFConfig& config, const std::string& source);

// quantization_config, when present and not null: FP8 (quant_method fp8,
// as Qwen3-FP8 and Qwen3.5/3.6-FP8 ship) is dequantized on load
// (target/fp8.hpp); any other method is refused naming it and `family`.
void check_quantization(const nlohmann::json& json, const std::string& family, const std::string& source);

// Qwen2, Qwen3, Llama: no sliding window, no MLP bias, plain RoPE.
void read_dense_family(const nlohmann::json& json, HFConfig& config, const std::string& source);
// Qwen3MoeForCausalLM (target/hf_config_qwen3_moe.cpp).
void read_qwen3_moe_family(const nlohmann::json& json, HFConfig& config, const std::string& source);
// The text_config of Qwen3_5(Moe)ForConditionalGeneration
// (target/hf_config_qwen3_5.cpp): layer_types, Gated DeltaNet's sizes,
// partial rotary, the gated attention, the MoE with its shared expert.
void read_qwen3_5_family(const nlohmann::json& text, HFConfig& config, const std::string& source);
// GptOssForCausalLM (target/hf_config_gpt_oss.cpp).
void read_gpt_oss_family(const nlohmann::json& json, HFConfig& config, const std::string& source);

}  // namespace dflow::target::config_parse
