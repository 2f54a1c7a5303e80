#include "model/tiny_target.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "model/safetensors.hpp"
#include "model/safetensors_sharded.hpp"

namespace dflow::model {

namespace {

int64_t head_dim_of(const TinyTargetOptions& o) { return o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads; }

nlohmann::json tiny_config_json(const TinyTargetOptions& o) {
  const int64_t mask_token_id = o.mask_token_id >= 0 ? o.mask_token_id : o.vocab_size - 1;
  const int64_t eos_token_id = o.eos_token_id >= 0 ? o.eos_token_id : o.vocab_size - 2;
  return {
      {"architectures", {"Qwen3ForCausalLM"}},
      {"model_type", "qwen3"},
      {"hidden_size", o.hidden_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"head_dim", head_dim_of(o)},
      {"intermediate_size", o.intermediate_size},
      {"vocab_size", o.vocab_size},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", o.rope_theta},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", o.tie_word_embeddings},
      {"torch_dtype", o.dtype == torch::kBFloat16 ? "bfloat16" : "float32"},
      {"bos_token_id", nullptr},
      {"eos_token_id", eos_token_id},
      {"dflow_mask_token_id", mask_token_id},
      {"dflow_tiny_pattern", o.pattern},
  };
}

}  // namespace

void random_tiny_weights(const TinyTargetOptions& o, const HFConfig& config, const TensorSink& sink) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  if (o.generate_on.is_cuda()) torch::cuda::manual_seed_all(o.seed);
  auto normal = [&](std::vector<int64_t> shape, double std_dev) {
    if (o.generate_on.is_cuda()) return torch::empty(shape, torch::dtype(torch::kFloat32).device(o.generate_on)).normal_(0.0, std_dev);
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
  // Each tensor is converted to the written dtype as soon as it is drawn, so
  // a bf16 model never exists in float32 as a whole (and, sharded, is
  // written a shard at a time).
  const auto add = [&](std::string name, const torch::Tensor& value) { sink(std::move(name), value.to(torch::kCPU, o.dtype)); };
  const torch::Tensor embedding = normal({o.vocab_size, hidden}, 1.0);
  add("model.embed_tokens.weight", embedding);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    add(prefix + "self_attn.q_proj.weight", normal({o.num_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.k_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.v_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.o_proj.weight", normal({hidden, o.num_heads * head_dim}, fan_in_hidden));
    add(prefix + "self_attn.q_norm.weight", torch::full({head_dim}, kQKNormWeight));
    add(prefix + "self_attn.k_norm.weight", torch::full({head_dim}, kQKNormWeight));
    add(prefix + "input_layernorm.weight", torch::ones({hidden}));
    add(prefix + "post_attention_layernorm.weight", torch::ones({hidden}));
    add(prefix + "mlp.gate_proj.weight", normal({o.intermediate_size, hidden}, fan_in_hidden));
    add(prefix + "mlp.up_proj.weight", normal({o.intermediate_size, hidden}, fan_in_hidden));
    add(prefix + "mlp.down_proj.weight", normal({hidden, o.intermediate_size}, fan_in_mlp));
  }
  add("model.norm.weight", torch::ones({hidden}));
  if (o.tie_word_embeddings) return;  // the embedding is the head (its logits are not peaked; fine for shapes)
  // (head - penalty * embedding / rms(embedding)) * logit scale, in place:
  // at 8B shapes each [V, H] float32 temporary is 2.5 GB.
  const torch::Tensor inverse_rms = torch::rsqrt(embedding.pow(2).mean(1, /*keepdim=*/true));  // [V, 1]
  torch::Tensor head = normal({o.vocab_size, hidden}, 1.0);
  head.addcmul_(embedding, inverse_rms, -kSelfRepeatPenalty).mul_(kLogitStd * fan_in_hidden);
  add("lm_head.weight", head);
}

HFConfig tiny_target_config(const TinyTargetOptions& o) { return parse_hf_config(tiny_config_json(o), "<tiny target config>"); }

HFConfig make_tiny_target(const TinyTargetOptions& o) {
  if (o.out_dir.empty()) throw std::invalid_argument("make_tiny_target: out_dir is empty");
  if (o.num_heads <= 0 || o.num_kv_heads <= 0 || (o.head_dim <= 0 && o.hidden_size % o.num_heads != 0) ||
      o.num_heads % o.num_kv_heads != 0 || o.vocab_size < 4 || o.num_layers < 1) {
    throw std::invalid_argument("make_tiny_target: need hidden_size % num_heads == 0 (or a head_dim), "
                                "num_heads % num_kv_heads == 0, vocab_size >= 4 and at least one layer");
  }
  if (o.dtype != torch::kFloat32 && o.dtype != torch::kBFloat16)
    throw std::invalid_argument("make_tiny_target: dtype must be float32 or bfloat16");
  const nlohmann::json config_json = tiny_config_json(o);
  const HFConfig config = parse_hf_config(config_json, (o.out_dir / "config.json").string());

  if (o.pattern != "random" && o.pattern != "echo")
    throw std::invalid_argument("make_tiny_target: pattern '" + o.pattern + "' is not one of: random, echo");
  if (o.pattern == "echo" && (o.tie_word_embeddings || o.dtype != torch::kFloat32 || o.head_dim > 0))
    throw std::invalid_argument("make_tiny_target: the echo pattern is float32, untied, head_dim hidden/heads");
  torch::NoGradGuard no_grad;
  std::filesystem::create_directories(o.out_dir);
  if (o.max_shard_bytes > 0) {  // written as drawn: the presets' 16 GB never sit in memory at once
    ShardedSafetensorsWriter writer(o.out_dir, o.max_shard_bytes);
    const TensorSink add = [&](std::string name, torch::Tensor tensor) { writer.add(std::move(name), std::move(tensor)); };
    if (o.pattern == "echo") {
      for (auto& [name, tensor] : echo_tiny_weights(o, config)) add(name, tensor);
    } else {
      random_tiny_weights(o, config, add);
    }
    writer.finish();
  } else {
    NamedTensorList tensors;
    if (o.pattern == "echo") tensors = echo_tiny_weights(o, config);
    else random_tiny_weights(o, config, [&](std::string name, torch::Tensor t) { tensors.emplace_back(std::move(name), std::move(t)); });
    write_safetensors(o.out_dir / "model.safetensors", tensors, {{"format", "pt"}});
  }
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

const std::vector<std::string>& target_presets() {
  static const std::vector<std::string> names{"qwen3-0.6b", "qwen3-8b"};
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
  } else {
    std::string known;
    for (const auto& name : target_presets()) known += (known.empty() ? "" : ", ") + name;
    throw std::invalid_argument("make_tiny_target: unknown preset '" + preset + "' (known: " + known + ")");
  }
  return o;
}

}  // namespace dflow::model
