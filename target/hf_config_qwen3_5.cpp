// The text_config of Qwen3_5ForConditionalGeneration and
// Qwen3_5MoeForConditionalGeneration (transformers' Qwen3_5TextConfig and
// Qwen3_5MoeTextConfig): a hybrid stack of Gated DeltaNet ("linear_attention")
// and gated full-attention layers, partial RoPE, and a dense MLP or routed
// experts with a shared expert on every layer.
#include "target/hf_config_families.hpp"

#include <string>

namespace dflow::target::config_parse {

namespace {

// Qwen3_5TextConfig's defaults where a key is absent.
int64_t linear_size(const nlohmann::json& text, const std::string& key, int64_t fallback, const std::string& source) {
  if (!text.contains(key)) return fallback;
  if (!text[key].is_number_integer() || text[key].get<int64_t>() <= 0) {
    throw config_error(source, "'" + key + "' must be a positive integer (a Gated DeltaNet size), got " +
                                   text[key].dump());
  }
  return text[key].get<int64_t>();
}

// layer_types, or transformers' default: every full_attention_interval-th
// layer full attention (4), the others linear.
std::vector<LayerKind> read_layer_kinds(const nlohmann::json& text, int64_t num_layers, const std::string& source) {
  std::vector<LayerKind> kinds;
  if (!text.contains("layer_types") || text["layer_types"].is_null()) {
    const int64_t interval = optional_int(text, "full_attention_interval", 4);
    if (interval <= 0) throw config_error(source, "full_attention_interval must be positive, got " + std::to_string(interval));
    for (int64_t i = 0; i < num_layers; ++i)
      kinds.push_back((i + 1) % interval != 0 ? LayerKind::linear_attention : LayerKind::full_attention);
    return kinds;
  }
  const auto& types = text["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != num_layers) {
    throw config_error(source, "layer_types must list one entry per layer (num_hidden_layers " +
                                   std::to_string(num_layers) + "), got " + types.dump());
  }
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string type = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
    if (type == "linear_attention") {
      kinds.push_back(LayerKind::linear_attention);
    } else if (type == "full_attention") {
      kinds.push_back(LayerKind::full_attention);
    } else {
      throw config_error(source, "layer_types[" + std::to_string(i) + "] is '" + type +
                                     "', which dflow does not run (it knows linear_attention and full_attention)");
    }
  }
  return kinds;
}

double partial_rotary_factor(const nlohmann::json& text) {
  double factor = optional_number(text, "partial_rotary_factor", 0.25);
  if (text.contains("rope_parameters") && text["rope_parameters"].is_object())
    factor = optional_number(text["rope_parameters"], "partial_rotary_factor", factor);
  return factor;
}

void read_experts(const nlohmann::json& text, HFConfig& config, const std::string& source) {
  MoeConfig& moe = config.moe;
  moe.num_experts = required_int(text, "num_experts", source);
  moe.experts_per_token = required_int(text, "num_experts_per_tok", source);
  if (moe.experts_per_token > moe.num_experts) {
    throw config_error(source, "num_experts_per_tok " + std::to_string(moe.experts_per_token) +
                                   " exceeds num_experts " + std::to_string(moe.num_experts));
  }
  moe.expert_intermediate_size = required_int(text, "moe_intermediate_size", source);
  moe.shared_expert_intermediate_size = required_int(text, "shared_expert_intermediate_size", source);
  moe.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalises the top-k
  moe.swiglu_limit = 0.0;
  moe.sparse_layers.assign(static_cast<size_t>(config.num_hidden_layers), true);  // every layer routed
}

}  // namespace

void read_qwen3_5_family(const nlohmann::json& text, HFConfig& config, const std::string& source) {
  const std::string activation = text.value("hidden_act", std::string("silu"));
  if (activation != "silu") throw config_error(source, "hidden_act '" + activation + "' is not supported (only silu)");
  read_plain_rope(text, config, source);
  const bool bias = optional_bool(text, "attention_bias", false);
  config.attention_bias = bias;
  config.attention_output_bias = bias;
  config.qk_norm = true;
  config.attention_output_gate = true;
  config.tensor_prefix = "model.language_model.";

  const double factor = partial_rotary_factor(text);
  const auto rotary = static_cast<int64_t>(static_cast<double>(config.head_dim) * factor);  // int(), as transformers
  if (!(factor > 0.0 && factor <= 1.0) || rotary <= 0 || rotary % 2 != 0) {
    throw config_error(source, "partial_rotary_factor " + std::to_string(factor) + " of head_dim " +
                                   std::to_string(config.head_dim) + " gives " + std::to_string(rotary) +
                                   " rotary dims; RoPE needs a positive even number, at most head_dim");
  }
  config.rotary_dim = rotary;

  config.layer_kinds = read_layer_kinds(text, config.num_hidden_layers, source);
  LinearAttentionConfig& linear = config.linear;
  linear.num_key_heads = linear_size(text, "linear_num_key_heads", 16, source);
  linear.num_value_heads = linear_size(text, "linear_num_value_heads", 32, source);
  linear.key_head_dim = linear_size(text, "linear_key_head_dim", 128, source);
  linear.value_head_dim = linear_size(text, "linear_value_head_dim", 128, source);
  linear.conv_kernel = linear_size(text, "linear_conv_kernel_dim", 4, source);
  if (linear.num_value_heads % linear.num_key_heads != 0) {
    throw config_error(source, "linear_num_value_heads " + std::to_string(linear.num_value_heads) +
                                   " is not a multiple of linear_num_key_heads " +
                                   std::to_string(linear.num_key_heads) +
                                   " (each key head serves a whole group of value heads)");
  }
  if (config.family == ModelFamily::Qwen3_5Moe) read_experts(text, config, source);
}

}  // namespace dflow::target::config_parse
