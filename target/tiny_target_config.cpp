// The tiny target's config.json per architecture, written with the keys and
// values the published checkpoints have (Qwen3-8B, Qwen3-30B-A3B,
// gpt-oss-20b; the Qwen3.5 wrappers' in tiny_target_qwen3_5.cpp), and the
// presets of real shapes.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "target/tiny_target_parts.hpp"

namespace dflow::target {

namespace tiny {

int64_t head_dim_of(const TinyTargetOptions& o) { return o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads; }

double rope_theta_of(const TinyTargetOptions& o) {
  if (o.rope_theta > 0) return o.rope_theta;
  return o.arch == "gpt_oss" ? 150000.0 : 10000.0;
}

bool has_experts(const TinyTargetOptions& o) {
  return o.arch == "qwen3_moe" || o.arch == "gpt_oss" || o.arch == "qwen3_5_moe";
}

bool sparse_layer(const TinyTargetOptions& o, int64_t layer) {
  if (o.arch == "gpt_oss" || o.arch == "qwen3_5_moe") return true;
  if (o.arch != "qwen3_moe") return false;
  const bool dense_by_list = std::find(o.mlp_only_layers.begin(), o.mlp_only_layers.end(), layer) != o.mlp_only_layers.end();
  return !dense_by_list && o.num_experts > 0 && (layer + 1) % o.decoder_sparse_step == 0;
}

bool sliding_layer(const TinyTargetOptions& o, int64_t layer) { return o.arch == "gpt_oss" && layer % 2 == 0; }

std::vector<double> rotary_inverse_frequencies(const TinyTargetOptions& o) {
  const int64_t dim = head_dim_of(o), half = dim / 2;
  const double base = rope_theta_of(o);
  std::vector<double> inverse(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inverse[static_cast<size_t>(i)] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
  if (o.arch != "gpt_oss") return inverse;
  // YaRN: dims that rotate more than beta_fast times over the original
  // context keep their frequency, those below beta_slow are divided by the
  // factor, a linear ramp between (the range not rounded: truncate false).
  const double pi = std::acos(-1.0);
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(static_cast<double>(kYarnOriginalMaxPositions) / (rotations * 2 * pi)) /
           (2 * std::log(base));
  };
  const double low = std::max(correction_dim(kYarnBetaFast), 0.0);
  double high = std::min(correction_dim(kYarnBetaSlow), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = inverse[static_cast<size_t>(i)];
    inverse[static_cast<size_t>(i)] = extrapolation / kYarnFactor * ramp + extrapolation * (1.0 - ramp);
  }
  return inverse;
}

namespace {

nlohmann::json layer_types(const TinyTargetOptions& o) {
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < o.num_layers; ++i) types.push_back(sliding_layer(o, i) ? "sliding_attention" : "full_attention");
  return types;
}

}  // namespace

nlohmann::json config_json(const TinyTargetOptions& o) {
  if (qwen3_5_arch(o)) return qwen3_5_config_json(o);
  const int64_t mask_token_id = o.mask_token_id >= 0 ? o.mask_token_id : o.vocab_size - 1;
  const int64_t eos_token_id = o.eos_token_id >= 0 ? o.eos_token_id : o.vocab_size - 2;
  const char* dtype = o.dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  nlohmann::json config{
      {"hidden_size", o.hidden_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"head_dim", head_dim_of(o)},
      {"intermediate_size", o.intermediate_size},
      {"vocab_size", o.vocab_size},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rope_theta", rope_theta_of(o)},
      {"hidden_act", "silu"},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", o.tie_word_embeddings},
      {"torch_dtype", dtype},
      {"eos_token_id", eos_token_id},
      {"dflow_mask_token_id", mask_token_id},
      {"dflow_tiny_pattern", o.pattern},
  };
  if (o.arch == "gpt_oss") {
    config.update({
        {"architectures", {"GptOssForCausalLM"}},
        {"model_type", "gpt_oss"},
        {"rms_norm_eps", 1e-5},
        {"attention_bias", true},
        {"num_local_experts", o.num_experts},
        {"experts_per_token", o.experts_per_token},
        {"num_experts_per_tok", o.experts_per_token},
        {"swiglu_limit", o.swiglu_limit},
        {"sliding_window", o.sliding_window},
        {"layer_types", layer_types(o)},
        {"initial_context_length", kYarnOriginalMaxPositions},
        {"rope_scaling",
         {{"rope_type", "yarn"},
          {"factor", kYarnFactor},
          {"original_max_position_embeddings", kYarnOriginalMaxPositions},
          {"beta_fast", kYarnBetaFast},
          {"beta_slow", kYarnBetaSlow},
          {"truncate", false}}},
        {"pad_token_id", nullptr},
        {"output_router_logits", false},
        {"router_aux_loss_coef", 0.9},
        {"use_cache", true},
    });
    if (o.mxfp4) {  // as gpt-oss-20b's config.json: everything but the experts stays unquantized
      config["quantization_config"] = {
          {"quant_method", "mxfp4"},
          {"modules_to_not_convert",
           {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
    }
    return config;
  }
  config.update({{"rms_norm_eps", 1e-6}, {"rope_scaling", nullptr}, {"attention_bias", false}, {"bos_token_id", nullptr}});
  if (o.arch == "qwen3_moe") {
    config.update({
        {"architectures", {"Qwen3MoeForCausalLM"}},
        {"model_type", "qwen3_moe"},
        {"num_experts", o.num_experts},
        {"num_experts_per_tok", o.experts_per_token},
        {"moe_intermediate_size", o.moe_intermediate_size},
        {"norm_topk_prob", o.norm_topk_prob},
        {"decoder_sparse_step", o.decoder_sparse_step},
        {"mlp_only_layers", o.mlp_only_layers},
        {"max_window_layers", o.num_layers},
        {"sliding_window", nullptr},
        {"use_sliding_window", false},
        {"output_router_logits", false},
        {"router_aux_loss_coef", 0.001},
        {"use_cache", true},
    });
    return config;
  }
  config.update({{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}});
  return config;
}

void check_options(const TinyTargetOptions& o) {
  const auto& arches = tiny_target_architectures();
  if (std::find(arches.begin(), arches.end(), o.arch) == arches.end())
    throw std::invalid_argument("make_tiny_target: arch '" + o.arch +
                                "' is not one of: qwen3, qwen3_moe, gpt_oss, qwen3_5, qwen3_5_moe");
  if (o.num_heads <= 0 || o.num_kv_heads <= 0 || (o.head_dim <= 0 && o.hidden_size % o.num_heads != 0) ||
      o.num_heads % o.num_kv_heads != 0 || o.vocab_size < 4 || o.num_layers < 1) {
    throw std::invalid_argument("make_tiny_target: need hidden_size % num_heads == 0 (or a head_dim), "
                                "num_heads % num_kv_heads == 0, vocab_size >= 4 and at least one layer");
  }
  if (o.dtype != torch::kFloat32 && o.dtype != torch::kBFloat16)
    throw std::invalid_argument("make_tiny_target: dtype must be float32 or bfloat16");
  if (o.pattern != "random" && o.pattern != "echo")
    throw std::invalid_argument("make_tiny_target: pattern '" + o.pattern + "' is not one of: random, echo");
  if (qwen3_5_arch(o)) check_qwen3_5_options(o);
  else if (!o.layer_types.empty())
    throw std::invalid_argument("make_tiny_target: layer_types are qwen3_5's and qwen3_5_moe's (" + o.arch +
                                " writes its own)");
  if (o.pattern == "echo" && (o.tie_word_embeddings || o.dtype != torch::kFloat32 || o.head_dim > 0))
    throw std::invalid_argument("make_tiny_target: the echo pattern is float32, untied, head_dim hidden/heads");
  if (has_experts(o) && (o.num_experts < 1 || o.experts_per_token < 1 || o.experts_per_token > o.num_experts))
    throw std::invalid_argument("make_tiny_target: " + o.arch + " needs 1 <= experts_per_token (" +
                                std::to_string(o.experts_per_token) + ") <= num_experts (" +
                                std::to_string(o.num_experts) + ")");
  if (o.arch == "qwen3_moe" && (o.decoder_sparse_step < 1 || o.moe_intermediate_size < 1))
    throw std::invalid_argument("make_tiny_target: qwen3_moe needs decoder_sparse_step >= 1 and moe_intermediate_size >= 1");
  if (o.arch == "gpt_oss" && o.sliding_window < 1)
    throw std::invalid_argument("make_tiny_target: gpt_oss needs a sliding_window >= 1");
  if (o.mxfp4 && (o.arch != "gpt_oss" || o.hidden_size % 32 != 0 || o.intermediate_size % 32 != 0))
    throw std::invalid_argument("make_tiny_target: MXFP4 experts are gpt_oss's, with hidden_size and "
                                "intermediate_size multiples of 32");
  if (o.arch == "gpt_oss" && o.pattern == "echo" && o.sliding_window < o.echo_lag)
    throw std::invalid_argument("make_tiny_target: the echo head sits in layer 0, a sliding layer of " +
                                std::to_string(o.sliding_window) + " tokens: it cannot see echo_lag " +
                                std::to_string(o.echo_lag) + " back (raise the sliding window)");
}

}  // namespace tiny

const std::vector<std::string>& tiny_target_architectures() {
  static const std::vector<std::string> names{"qwen3", "qwen3_moe", "gpt_oss", "qwen3_5", "qwen3_5_moe"};
  return names;
}

HFConfig tiny_target_config(const TinyTargetOptions& o) {
  return parse_hf_config(tiny::config_json(o), "<tiny target config>");
}

const std::vector<std::string>& target_presets() {
  static const std::vector<std::string> names{"qwen3-0.6b", "qwen3-8b", "qwen3-30b-a3b", "gpt-oss-20b",
                                              "qwen3.5-35b-a3b"};
  return names;
}

TinyTargetOptions preset_target_options(const std::string& preset, TinyTargetOptions base) {
  TinyTargetOptions o;
  o.out_dir = base.out_dir;
  o.seed = base.seed;
  o.generate_on = base.generate_on;
  o.vocab_size = 151936;
  o.head_dim = 128;
  o.num_kv_heads = 8;
  o.max_position_embeddings = 40960;
  o.rope_theta = 1e6;
  o.mask_token_id = 151669;
  o.eos_token_id = 151645;
  o.dtype = torch::kBFloat16;
  o.max_shard_bytes = int64_t{512} << 20;
  if (preset == "qwen3-0.6b") {
    o.num_layers = 28;
    o.hidden_size = 1024;
    o.num_heads = 16;
    o.intermediate_size = 3072;
    o.tie_word_embeddings = true;
  } else if (preset == "qwen3-8b") {
    o.num_layers = 36;
    o.hidden_size = 4096;
    o.num_heads = 32;
    o.intermediate_size = 12288;
    o.tie_word_embeddings = false;
  } else if (preset == "qwen3-30b-a3b") {
    o.arch = "qwen3_moe";
    o.num_layers = 48;
    o.hidden_size = 2048;
    o.num_heads = 32;
    o.num_kv_heads = 4;
    o.intermediate_size = 6144;  // no layer is dense (mlp_only_layers is empty), as published
    o.num_experts = 128;
    o.experts_per_token = 8;
    o.moe_intermediate_size = 768;
    o.norm_topk_prob = true;
    o.tie_word_embeddings = false;
  } else if (preset == "gpt-oss-20b") {
    o.arch = "gpt_oss";
    o.num_layers = 24;
    o.hidden_size = 2880;
    o.num_heads = 64;
    o.head_dim = 64;
    o.intermediate_size = 2880;
    o.num_experts = 32;
    o.experts_per_token = 4;
    o.sliding_window = 128;
    o.vocab_size = 201088;
    o.max_position_embeddings = 131072;
    o.rope_theta = 150000.0;
    o.eos_token_id = 200002;
    o.mask_token_id = 201087;
    o.tie_word_embeddings = false;
  } else if (preset == "qwen3.5-35b-a3b") {  // its text_config (make_wrapper_head.py writes the same)
    o.arch = "qwen3_5_moe";
    o.num_layers = 40;  // layer_types: three linear_attention, then full_attention, from full_attention_interval 4
    o.hidden_size = 2048;
    o.num_heads = 16;
    o.num_kv_heads = 2;
    o.head_dim = 256;
    o.partial_rotary_factor = 0.25;
    o.linear_num_key_heads = 16;
    o.linear_num_value_heads = 32;
    o.linear_key_head_dim = 128;
    o.linear_value_head_dim = 128;
    o.linear_conv_kernel = 4;
    o.num_experts = 256;
    o.experts_per_token = 8;
    o.moe_intermediate_size = 512;
    o.shared_expert_intermediate_size = 512;
    o.vocab_size = 248320;
    o.max_position_embeddings = 262144;
    o.rope_theta = 1e7;
    o.eos_token_id = 248044;
    o.mask_token_id = 248319;  // the last row, past the tokenizer's ids
    o.tie_word_embeddings = false;
  } else {
    std::string known;
    for (const auto& name : target_presets()) known += (known.empty() ? "" : ", ") + name;
    throw std::invalid_argument("make_tiny_target: unknown preset '" + preset + "' (known: " + known + ")");
  }
  return o;
}

}  // namespace dflow::target
