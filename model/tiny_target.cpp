#include "model/tiny_target.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "model/safetensors.hpp"

namespace dflow::model {

namespace {

nlohmann::json tiny_config_json(const TinyTargetOptions& o) {
  const int64_t mask_token_id = o.vocab_size - 1;
  const int64_t eos_token_id = o.vocab_size - 2;
  return {
      {"architectures", {"Qwen3ForCausalLM"}},
      {"model_type", "qwen3"},
      {"hidden_size", o.hidden_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"head_dim", o.hidden_size / o.num_heads},
      {"intermediate_size", o.intermediate_size},
      {"vocab_size", o.vocab_size},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", o.rope_theta},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", false},
      {"torch_dtype", "float32"},
      {"bos_token_id", nullptr},
      {"eos_token_id", eos_token_id},
      {"dflow_mask_token_id", mask_token_id},
      {"dflow_tiny_pattern", o.pattern},
  };
}

}  // namespace

NamedTensorList random_tiny_weights(const TinyTargetOptions& o, const HFConfig& config) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  auto normal = [&](std::vector<int64_t> shape, double std_dev) {
    return torch::empty(shape, torch::kFloat32).normal_(0.0, std_dev, generator);
  };
  const int64_t hidden = o.hidden_size, head_dim = config.head_dim;
  const double fan_in_hidden = 1.0 / std::sqrt(static_cast<double>(hidden));
  const double fan_in_mlp = 1.0 / std::sqrt(static_cast<double>(o.intermediate_size));

  // Unit-variance embeddings and 1/sqrt(fan_in) projections keep every layer
  // contributing. q/k norm weights of 2 sharpen attention, so the next token
  // depends on the history and not only on the current token (which alone
  // locks greedy decoding into short cycles). The LM head gives logits of
  // std ~4 (top-1 probability ~0.5: confident, learnable continuations) and
  // leans away from each token's own embedding, which the residual stream
  // carries, so that a token rarely predicts itself.
  constexpr double kQKNormWeight = 2.0;
  constexpr double kLogitStd = 4.0;
  constexpr double kSelfRepeatPenalty = 0.5;
  NamedTensorList tensors;
  const torch::Tensor embedding = normal({o.vocab_size, hidden}, 1.0);
  tensors.emplace_back("model.embed_tokens.weight", embedding);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    tensors.emplace_back(prefix + "self_attn.q_proj.weight", normal({o.num_heads * head_dim, hidden}, fan_in_hidden));
    tensors.emplace_back(prefix + "self_attn.k_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    tensors.emplace_back(prefix + "self_attn.v_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    tensors.emplace_back(prefix + "self_attn.o_proj.weight", normal({hidden, o.num_heads * head_dim}, fan_in_hidden));
    tensors.emplace_back(prefix + "self_attn.q_norm.weight", torch::full({head_dim}, kQKNormWeight));
    tensors.emplace_back(prefix + "self_attn.k_norm.weight", torch::full({head_dim}, kQKNormWeight));
    tensors.emplace_back(prefix + "input_layernorm.weight", torch::ones({hidden}));
    tensors.emplace_back(prefix + "post_attention_layernorm.weight", torch::ones({hidden}));
    tensors.emplace_back(prefix + "mlp.gate_proj.weight", normal({o.intermediate_size, hidden}, fan_in_hidden));
    tensors.emplace_back(prefix + "mlp.up_proj.weight", normal({o.intermediate_size, hidden}, fan_in_hidden));
    tensors.emplace_back(prefix + "mlp.down_proj.weight", normal({hidden, o.intermediate_size}, fan_in_mlp));
  }
  tensors.emplace_back("model.norm.weight", torch::ones({hidden}));
  const torch::Tensor unit_rms_embedding = embedding * torch::rsqrt(embedding.pow(2).mean(1, /*keepdim=*/true));
  tensors.emplace_back("lm_head.weight", (normal({o.vocab_size, hidden}, 1.0) - kSelfRepeatPenalty * unit_rms_embedding) *
                                             (kLogitStd * fan_in_hidden));

  return tensors;
}

HFConfig make_tiny_target(const TinyTargetOptions& o) {
  if (o.out_dir.empty()) throw std::invalid_argument("make_tiny_target: out_dir is empty");
  if (o.num_heads <= 0 || o.num_kv_heads <= 0 || o.hidden_size % o.num_heads != 0 || o.num_heads % o.num_kv_heads != 0 ||
      o.vocab_size < 4 || o.num_layers < 1) {
    throw std::invalid_argument("make_tiny_target: need hidden_size % num_heads == 0, num_heads % num_kv_heads == 0, "
                                "vocab_size >= 4 and at least one layer");
  }
  const nlohmann::json config_json = tiny_config_json(o);
  const HFConfig config = parse_hf_config(config_json, (o.out_dir / "config.json").string());

  if (o.pattern != "random" && o.pattern != "echo")
    throw std::invalid_argument("make_tiny_target: pattern '" + o.pattern + "' is not one of: random, echo");
  torch::NoGradGuard no_grad;
  const NamedTensorList tensors = o.pattern == "echo" ? echo_tiny_weights(o, config) : random_tiny_weights(o, config);

  std::filesystem::create_directories(o.out_dir);
  write_safetensors(o.out_dir / "model.safetensors", tensors, {{"format", "pt"}});
  const auto config_path = o.out_dir / "config.json";
  auto temp_path = config_path;
  temp_path += ".tmp";
  {
    std::ofstream out(temp_path);
    out << config_json.dump(2) << "\n";
    if (!out) throw std::runtime_error("make_tiny_target: cannot write '" + temp_path.string() + "'");
  }
  std::filesystem::rename(temp_path, config_path);
  return config;
}

}  // namespace dflow::model
