// GptOssForCausalLM's config.json, read as transformers' GptOssConfig reads
// it (its defaults where a key is absent): attention with biases on q, k, v
// and o and a learned sink per head, sliding-window and full layers
// (layer_types), YaRN rotary scaling, routed experts on every layer (top-k of
// the router's logits, clamped SwiGLU), optionally stored as MXFP4.
#include "target/hf_config_families.hpp"

#include <set>
#include <string>

namespace dflow::target::config_parse {

namespace {

// GptOssConfig's defaults for keys every config here may omit.
constexpr double kDefaultRopeTheta = 150000.0;
constexpr int64_t kDefaultSlidingWindow = 128;

int64_t positive_int(const nlohmann::json& json, const std::string& key, int64_t fallback, const std::string& source) {
  if (!json.contains(key)) return fallback;
  if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0) {
    throw config_error(source, "'" + key + "' must be a positive integer, got " + json[key].dump());
  }
  return json[key].get<int64_t>();
}

double number_value(const nlohmann::json& json, const std::string& key, double fallback, const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_number()) throw config_error(source, "'" + key + "' must be a number, got " + json[key].dump());
  return json[key].get<double>();
}

// transformers writes num_local_experts; `num_experts` is its alias.
int64_t read_num_experts(const nlohmann::json& json, const std::string& source) {
  const int64_t local = positive_int(json, "num_local_experts", 128, source);
  if (json.contains("num_experts")) {
    const int64_t alias = positive_int(json, "num_experts", local, source);
    if (json.contains("num_local_experts") && alias != local) {
      throw config_error(source, "num_experts " + std::to_string(alias) + " and num_local_experts " +
                                     std::to_string(local) + " disagree");
    }
    return alias;
  }
  return local;
}

// layer_types and sliding_window -> the window of each layer (0: full).
std::vector<int64_t> read_windows(const nlohmann::json& json, int64_t num_layers, const std::string& source) {
  std::vector<std::string> types;
  if (json.contains("layer_types") && !json["layer_types"].is_null()) {
    const auto& listed = json["layer_types"];
    if (!listed.is_array() || static_cast<int64_t>(listed.size()) != num_layers) {
      throw config_error(source, "layer_types must list one type per layer (" + std::to_string(num_layers) +
                                     "), got " + listed.dump());
    }
    for (const auto& type : listed) {
      if (!type.is_string() || (type != "sliding_attention" && type != "full_attention")) {
        throw config_error(source, "layer_types entry " + type.dump() +
                                       " is not supported (dflow implements sliding_attention and full_attention)");
      }
      types.push_back(type.get<std::string>());
    }
  } else {  // GptOssConfig's default: even layers slide, odd layers are full
    for (int64_t i = 0; i < num_layers; ++i) types.push_back((i + 1) % 2 ? "sliding_attention" : "full_attention");
  }
  int64_t window = kDefaultSlidingWindow;
  if (json.contains("sliding_window")) {
    if (json["sliding_window"].is_null()) {
      window = 0;
    } else {
      window = positive_int(json, "sliding_window", kDefaultSlidingWindow, source);
    }
  }
  std::vector<int64_t> windows;
  for (const std::string& type : types) {
    if (type == "sliding_attention" && window == 0) {
      throw config_error(source, "sliding_window is null but layer_types has sliding_attention layers");
    }
    windows.push_back(type == "sliding_attention" ? window : 0);
  }
  return windows;
}

// rope_scaling (older configs) or rope_parameters, as transformers'
// standardize_rope_params reads them: rope_scaling first, the dict's own
// rope_theta before the top-level one, rope_type "default" when unnamed.
void read_rope(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  config.rope_theta = number_value(json, "rope_theta", kDefaultRopeTheta, source);
  nlohmann::json rope;
  std::string from;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (json.contains(key) && !json[key].is_null() && !(json[key].is_object() && json[key].empty())) {
      if (!json[key].is_object()) throw config_error(source, std::string(key) + " must be an object, got " + json[key].dump());
      rope = json[key];
      from = key;
    }
  }
  if (from.empty()) {  // GptOssConfig's default: gpt-oss's own YaRN
    rope = {{"rope_type", "yarn"},   {"factor", 32.0},  {"beta_fast", 32.0},
            {"beta_slow", 1.0},      {"truncate", false}, {"original_max_position_embeddings", 4096}};
    from = "rope_parameters";
  }
  config.rope_theta = number_value(rope, "rope_theta", config.rope_theta, source);
  const std::string described = from + " " + rope.dump();
  const nlohmann::json type_value = rope.contains("rope_type") ? rope["rope_type"] : rope.value("type", nlohmann::json("default"));
  if (!type_value.is_string()) throw config_error(source, described + ": rope_type must be a string");
  const std::string type = type_value.get<std::string>();
  if (type == "default") {
    for (const auto& [key, value] : rope.items()) {
      if (key != "rope_type" && key != "type" && key != "rope_theta") {
        throw config_error(source, described + ": key '" + key + "' (" + value.dump() +
                                       ") is not supported with rope_type 'default'");
      }
    }
    config.rope_scaling = RopeScaling{};
    return;
  }
  if (type != "yarn") {
    throw config_error(source, described + " (rope_type '" + type + "') is not supported (dflow implements "
                                           "default and yarn rotary embeddings)");
  }
  const std::set<std::string> implemented = {"rope_type", "type", "rope_theta", "factor",
                                             "original_max_position_embeddings", "beta_fast", "beta_slow",
                                             "truncate"};
  for (const auto& [key, value] : rope.items()) {
    if (key == "partial_rotary_factor" && value.is_number() && value.get<double>() == 1.0) continue;
    if (implemented.count(key) == 0) {
      throw config_error(source, described + ": key '" + key + "' (" + value.dump() +
                                     ") is not supported (dflow's yarn takes factor, original_max_position_embeddings, "
                                     "beta_fast, beta_slow and truncate)");
    }
  }
  RopeScaling& yarn = config.rope_scaling;
  yarn.type = "yarn";
  // A top-level original_max_position_embeddings wins, as in transformers.
  yarn.original_max_position_embeddings =
      json.contains("original_max_position_embeddings")
          ? positive_int(json, "original_max_position_embeddings", 0, source)
          : positive_int(rope, "original_max_position_embeddings", config.max_position_embeddings, source);
  if (yarn.original_max_position_embeddings <= 0) {
    throw config_error(source, described + ": yarn needs original_max_position_embeddings");
  }
  yarn.factor = rope.contains("factor") && !rope["factor"].is_null()
                    ? number_value(rope, "factor", 1.0, source)
                    : static_cast<double>(config.max_position_embeddings) /
                          static_cast<double>(yarn.original_max_position_embeddings);
  if (!(yarn.factor >= 1.0)) throw config_error(source, described + ": yarn factor must be >= 1");
  // transformers' `get("beta_fast") or 32`: a zero is the default too.
  const double beta_fast = number_value(rope, "beta_fast", 0.0, source);
  const double beta_slow = number_value(rope, "beta_slow", 0.0, source);
  yarn.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
  yarn.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
  yarn.truncate = true;
  if (rope.contains("truncate") && !rope["truncate"].is_null()) {
    if (!rope["truncate"].is_boolean()) throw config_error(source, described + ": truncate must be a boolean");
    yarn.truncate = rope["truncate"].get<bool>();
  }
}

void read_quantization(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  if (!json.contains("quantization_config") || json["quantization_config"].is_null()) return;
  const auto& quantization = json["quantization_config"];
  const std::string described = "quantization_config " + quantization.dump();
  if (!quantization.is_object()) throw config_error(source, described + " is not an object");
  const std::string method = quantization.value("quant_method", std::string());
  if (method != "mxfp4") {
    throw config_error(source, described + ": quant_method '" + method +
                                   "' is not supported for gpt_oss (dflow implements mxfp4)");
  }
  for (const auto& [key, value] : quantization.items()) {
    // Which tensors are MXFP4 the checkpoint's names say (*_blocks and
    // *_scales); modules_to_not_convert only names those left as they are,
    // and dequantize is what dflow does anyway.
    if (key == "quant_method" || key == "dequantize") continue;
    if (key == "modules_to_not_convert" && (value.is_null() || value.is_array())) continue;
    throw config_error(source, described + ": key '" + key + "' (" + value.dump() + ") is not supported");
  }
  config.moe.mxfp4 = true;
}

}  // namespace

void read_gpt_oss_family(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  // hidden_act, attention_dropout, router_aux_loss_coef and the like do not
  // enter GptOssForCausalLM's inference forward: they are not read.
  config.head_dim = positive_int(json, "head_dim", 64, source);
  config.num_key_value_heads = positive_int(json, "num_key_value_heads", 8, source);
  config.rms_norm_eps = number_value(json, "rms_norm_eps", 1e-5, source);
  config.max_position_embeddings = positive_int(json, "max_position_embeddings", 131072, source);
  const bool bias = optional_bool(json, "attention_bias", true);
  config.attention_bias = bias;
  config.attention_output_bias = bias;  // GptOssAttention's o_proj takes attention_bias too
  config.qk_norm = false;
  config.attention_sinks = true;
  config.sliding_window_per_layer = read_windows(json, config.num_hidden_layers, source);
  read_rope(json, config, source);

  MoeConfig& moe = config.moe;
  moe.num_experts = read_num_experts(json, source);
  moe.experts_per_token = positive_int(json, "num_experts_per_tok", 4, source);
  if (moe.experts_per_token > moe.num_experts) {
    throw config_error(source, "num_experts_per_tok " + std::to_string(moe.experts_per_token) +
                                   " exceeds num_local_experts " + std::to_string(moe.num_experts));
  }
  moe.expert_intermediate_size = config.intermediate_size;
  moe.norm_topk_prob = false;
  moe.swiglu_alpha = number_value(json, "swiglu_alpha", 1.702, source);
  moe.swiglu_limit = number_value(json, "swiglu_limit", 7.0, source);
  if (!(moe.swiglu_limit > 0.0)) {
    throw config_error(source, "swiglu_limit " + json["swiglu_limit"].dump() + " is not supported (it must be > 0)");
  }
  moe.sparse_layers.assign(static_cast<size_t>(config.num_hidden_layers), true);
  read_quantization(json, config, source);
}

}  // namespace dflow::target::config_parse
