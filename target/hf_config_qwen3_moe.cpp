// Qwen3MoeForCausalLM's config.json: Qwen3's attention (q/k norms, one
// attention_bias for q, k, v and o), plain RoPE, and routed experts with
// softmax top-k gating on the layers transformers makes sparse.
#include "target/hf_config_families.hpp"

#include <string>

namespace dflow::target::config_parse {

namespace {

// transformers writes `num_local_experts` (its attribute_map's target); the
// published checkpoints write `num_experts`. Either, or both when they agree.
int64_t read_num_experts(const nlohmann::json& json, const std::string& source) {
  const bool has_experts = json.contains("num_experts"), has_local = json.contains("num_local_experts");
  if (!has_experts && !has_local) throw config_error(source, "missing 'num_experts'");
  const auto read = [&](const std::string& key) {
    if (!json[key].is_number_integer() || json[key].get<int64_t>() < 0) {
      throw config_error(source, "'" + key + "' must be a non-negative integer, got " + json[key].dump());
    }
    return json[key].get<int64_t>();
  };
  const int64_t experts = has_experts ? read("num_experts") : read("num_local_experts");
  if (has_experts && has_local && read("num_local_experts") != experts) {
    throw config_error(source, "num_experts " + std::to_string(experts) + " and num_local_experts " +
                                   json["num_local_experts"].dump() + " disagree");
  }
  return experts;
}

std::vector<bool> read_sparse_layers(const nlohmann::json& json, int64_t num_layers, int64_t num_experts,
                                     const std::string& source) {
  const int64_t step = optional_int(json, "decoder_sparse_step", 1);
  if (json.contains("decoder_sparse_step") && (!json["decoder_sparse_step"].is_number_integer() || step <= 0)) {
    throw config_error(source, "decoder_sparse_step must be a positive integer, got " +
                                   json["decoder_sparse_step"].dump());
  }
  std::vector<bool> dense(static_cast<size_t>(num_layers), false);
  if (json.contains("mlp_only_layers") && !json["mlp_only_layers"].is_null()) {
    const auto& listed = json["mlp_only_layers"];
    if (!listed.is_array()) throw config_error(source, "mlp_only_layers must be a list, got " + listed.dump());
    for (const auto& layer : listed) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= num_layers) {
        throw config_error(source, "mlp_only_layers entry " + layer.dump() + " is not a layer index in [0, " +
                                       std::to_string(num_layers) + ")");
      }
      dense[static_cast<size_t>(layer.get<int64_t>())] = true;
    }
  }
  // As Qwen3MoeDecoderLayer decides.
  std::vector<bool> sparse(static_cast<size_t>(num_layers), false);
  for (int64_t i = 0; i < num_layers; ++i) {
    sparse[static_cast<size_t>(i)] = !dense[static_cast<size_t>(i)] && num_experts > 0 && (i + 1) % step == 0;
  }
  return sparse;
}

}  // namespace

void read_qwen3_moe_family(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  const std::string activation = json.value("hidden_act", std::string("silu"));
  if (activation != "silu") throw config_error(source, "hidden_act '" + activation + "' is not supported (only silu)");
  if (optional_bool(json, "use_sliding_window", false)) {
    throw config_error(source, "use_sliding_window is true; sliding-window attention is not supported for qwen3_moe");
  }
  if (optional_bool(json, "mlp_bias", false)) throw config_error(source, "mlp_bias is true; MLP biases are not supported");
  check_quantization(json, "qwen3_moe", source);
  read_plain_rope(json, config, source);
  const bool bias = optional_bool(json, "attention_bias", false);
  config.attention_bias = bias;
  config.attention_output_bias = bias;
  config.qk_norm = true;

  MoeConfig& moe = config.moe;
  moe.num_experts = read_num_experts(json, source);
  if (moe.num_experts > 0) {
    moe.experts_per_token = required_int(json, "num_experts_per_tok", source);
    if (moe.experts_per_token > moe.num_experts) {
      throw config_error(source, "num_experts_per_tok " + std::to_string(moe.experts_per_token) +
                                     " exceeds num_experts " + std::to_string(moe.num_experts));
    }
    moe.expert_intermediate_size = required_int(json, "moe_intermediate_size", source);
  }
  moe.norm_topk_prob = optional_bool(json, "norm_topk_prob", false);
  moe.swiglu_limit = 0.0;
  moe.sparse_layers = read_sparse_layers(json, config.num_hidden_layers, moe.num_experts, source);
}

}  // namespace dflow::target::config_parse
