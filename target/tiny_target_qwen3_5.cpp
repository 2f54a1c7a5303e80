// The Qwen3.5/3.6 tiny target (qwen3_5, qwen3_5_moe), random pattern: the
// multimodal wrapper's config.json and its text model's weights, laid out as
// transformers 5.24's save_pretrained writes Qwen3_5ForConditionalGeneration
// and Qwen3_5MoeForConditionalGeneration: the text model's keys in
// text_config, its tensors under model.language_model.*, lm_head.weight
// unless tied. No vision tower is written (dflow never loads it); the config
// names a one-block one so that transformers can still build the wrapper
// (its vision weights then start from their init).
#include <cmath>
#include <stdexcept>

#include "target/tiny_target_parts.hpp"

namespace dflow::target::tiny {

namespace {

constexpr const char* kLinear = "linear_attention";
constexpr const char* kFull = "full_attention";

// int(head_dim x factor), as transformers computes the rotary width.
int64_t rotary_dims(const TinyTargetOptions& o) {
  return static_cast<int64_t>(static_cast<double>(head_dim_of(o)) * o.partial_rotary_factor);
}

std::string refused(const std::string& what) { return "make_tiny_target: " + what; }

}  // namespace

bool qwen3_5_arch(const TinyTargetOptions& o) { return o.arch == "qwen3_5" || o.arch == "qwen3_5_moe"; }

std::vector<std::string> qwen3_5_layer_types(const TinyTargetOptions& o) {
  if (!o.layer_types.empty()) return o.layer_types;
  std::vector<std::string> types;
  for (int64_t i = 0; i < o.num_layers; ++i) types.emplace_back((i + 1) % o.full_attention_interval == 0 ? kFull : kLinear);
  return types;
}

nlohmann::json qwen3_5_config_json(const TinyTargetOptions& o) {
  const bool moe = o.arch == "qwen3_5_moe";
  const int64_t mask_token_id = o.mask_token_id >= 0 ? o.mask_token_id : o.vocab_size - 1;
  const int64_t eos_token_id = o.eos_token_id >= 0 ? o.eos_token_id : o.vocab_size - 2;
  nlohmann::json text{
      {"model_type", moe ? "qwen3_5_moe_text" : "qwen3_5_text"},
      {"hidden_size", o.hidden_size},
      {"num_hidden_layers", o.num_layers},
      {"layer_types", qwen3_5_layer_types(o)},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"head_dim", head_dim_of(o)},
      {"linear_num_key_heads", o.linear_num_key_heads},
      {"linear_num_value_heads", o.linear_num_value_heads},
      {"linear_key_head_dim", o.linear_key_head_dim},
      {"linear_value_head_dim", o.linear_value_head_dim},
      {"linear_conv_kernel_dim", o.linear_conv_kernel},
      {"vocab_size", o.vocab_size},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", rope_theta_of(o)}, {"partial_rotary_factor", o.partial_rotary_factor}}},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", o.tie_word_embeddings},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"eos_token_id", eos_token_id},
  };
  if (moe) {
    text.update({
        {"num_experts", o.num_experts},
        {"num_experts_per_tok", o.experts_per_token},
        {"moe_intermediate_size", o.moe_intermediate_size},
        {"shared_expert_intermediate_size", o.shared_expert_intermediate_size},
        {"output_router_logits", false},
        {"router_aux_loss_coef", 0.001},
    });
  } else {
    text["intermediate_size"] = o.intermediate_size;
  }
  const nlohmann::json vision{
      {"model_type", moe ? "qwen3_5_moe_vision" : "qwen3_5_vision"},
      {"depth", 1},
      {"hidden_size", 32},
      {"intermediate_size", 32},
      {"num_heads", 2},
      {"out_hidden_size", o.hidden_size},  // the merger's output feeds the text model
      {"hidden_act", "gelu_pytorch_tanh"},
      {"in_channels", 3},
      {"patch_size", 16},
      {"spatial_merge_size", 2},
      {"temporal_patch_size", 2},
      {"num_position_embeddings", 2304},
      {"initializer_range", 0.02},
      {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", 10000.0}}},
  };
  return {
      {"architectures", {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
      {"model_type", moe ? "qwen3_5_moe" : "qwen3_5"},
      {"text_config", text},
      {"vision_config", vision},
      {"tie_word_embeddings", o.tie_word_embeddings},
      {"dtype", o.dtype == torch::kBFloat16 ? "bfloat16" : "float32"},
      // The wrapper's own token ids (transformers' defaults, the published ones).
      {"image_token_id", 248056},
      {"video_token_id", 248057},
      {"vision_start_token_id", 248053},
      {"vision_end_token_id", 248054},
      {"dflow_mask_token_id", mask_token_id},
      {"dflow_tiny_pattern", o.pattern},
  };
}

void check_qwen3_5_options(const TinyTargetOptions& o) {
  if (o.pattern != "random") {
    throw std::invalid_argument(refused(
        "the echo pattern is built for attention-only stacks (qwen3, qwen3_moe, gpt_oss: a head in layer 0 that "
        "looks echo_lag - 1 back); " + o.arch + " has Gated DeltaNet layers, an attention output gate and partial "
        "rotary it does not set: use pattern random"));
  }
  if (o.layer_types.empty() && o.full_attention_interval < 1)
    throw std::invalid_argument(refused("full_attention_interval must be >= 1, got " + std::to_string(o.full_attention_interval)));
  if (!o.layer_types.empty() && static_cast<int64_t>(o.layer_types.size()) != o.num_layers) {
    throw std::invalid_argument(refused("layer_types lists " + std::to_string(o.layer_types.size()) +
                                        " kinds for " + std::to_string(o.num_layers) + " layers: give one per layer"));
  }
  for (size_t i = 0; i < o.layer_types.size(); ++i) {
    if (o.layer_types[i] != kLinear && o.layer_types[i] != kFull)
      throw std::invalid_argument(refused("layer_types[" + std::to_string(i) + "] is '" + o.layer_types[i] +
                                          "'; " + o.arch + " layers are linear_attention or full_attention"));
  }
  if (o.linear_num_key_heads < 1 || o.linear_num_value_heads < 1 || o.linear_key_head_dim < 1 ||
      o.linear_value_head_dim < 1 || o.linear_conv_kernel < 1) {
    throw std::invalid_argument(refused("the Gated DeltaNet sizes (linear key heads " + std::to_string(o.linear_num_key_heads) +
                                        ", value heads " + std::to_string(o.linear_num_value_heads) + ", key head dim " +
                                        std::to_string(o.linear_key_head_dim) + ", value head dim " +
                                        std::to_string(o.linear_value_head_dim) + ", conv kernel " +
                                        std::to_string(o.linear_conv_kernel) + ") must all be >= 1"));
  }
  if (o.linear_num_value_heads % o.linear_num_key_heads != 0) {
    throw std::invalid_argument(refused("linear value heads " + std::to_string(o.linear_num_value_heads) +
                                        " are not a multiple of linear key heads " +
                                        std::to_string(o.linear_num_key_heads) +
                                        " (each key head serves a whole group of value heads)"));
  }
  const int64_t rotary = rotary_dims(o);
  if (!(o.partial_rotary_factor > 0.0 && o.partial_rotary_factor <= 1.0) || rotary <= 0 || rotary % 2 != 0) {
    throw std::invalid_argument(refused("partial_rotary_factor " + std::to_string(o.partial_rotary_factor) +
                                        " of head_dim " + std::to_string(head_dim_of(o)) + " rotates " +
                                        std::to_string(rotary) + " dims; RoPE needs a positive even number"));
  }
  if (o.arch == "qwen3_5_moe" && (o.moe_intermediate_size < 1 || o.shared_expert_intermediate_size < 1))
    throw std::invalid_argument(refused("qwen3_5_moe needs moe_intermediate_size and shared_expert_intermediate_size >= 1"));
  if (o.arch == "qwen3_5_moe" && (o.decoder_sparse_step != 1 || !o.mlp_only_layers.empty()))
    throw std::invalid_argument(refused("qwen3_5_moe routes every layer: decoder_sparse_step and mlp_only_layers "
                                        "are qwen3_moe's"));
  if (o.arch == "qwen3_5" && o.intermediate_size < 1)
    throw std::invalid_argument(refused("qwen3_5 needs an intermediate_size >= 1"));
}

void add_qwen3_5_layers(const TinyTargetOptions& o, const std::string& prefix, const Normal& normal,
                        const Uniform& uniform, const Sink& add) {
  const int64_t hidden = o.hidden_size, head_dim = head_dim_of(o);
  const auto fan_in = [](int64_t width) { return 1.0 / std::sqrt(static_cast<double>(width)); };
  const int64_t key_dim = o.linear_num_key_heads * o.linear_key_head_dim;
  const int64_t value_dim = o.linear_num_value_heads * o.linear_value_head_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim, value_heads = o.linear_num_value_heads;
  // As the random qwen3's q/k norm weights of 2 (here 1 + 1): attention
  // that depends on the history, not only on the current token.
  constexpr double kQKNormWeight = 1.0;
  // The delta rule's decay per token, exp(-A x softplus(a + dt_bias)): A
  // in [1, 16] and dt_bias the inverse softplus of a step log-uniform in
  // [0.001, 0.1] (Mamba's ranges), so heads keep from ~0.2 to ~0.999 of
  // their state per token: short and long memories, none frozen or wiped.
  constexpr double kLowA = 1.0, kHighA = 16.0, kLowStep = 1e-3, kHighStep = 1e-1;
  const std::vector<std::string> types = qwen3_5_layer_types(o);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string layer = prefix + "layers." + std::to_string(i) + ".";
    if (types[static_cast<size_t>(i)] == kLinear) {
      const std::string at = layer + "linear_attn.";
      add(at + "in_proj_qkv.weight", normal({conv_dim, hidden}, fan_in(hidden)));
      add(at + "in_proj_z.weight", normal({value_dim, hidden}, fan_in(hidden)));   // the output gate
      add(at + "in_proj_b.weight", normal({value_heads, hidden}, fan_in(hidden)));  // beta = sigmoid(b)
      add(at + "in_proj_a.weight", normal({value_heads, hidden}, fan_in(hidden)));
      add(at + "conv1d.weight", normal({conv_dim, 1, o.linear_conv_kernel}, fan_in(o.linear_conv_kernel)));
      const torch::Tensor step = torch::exp(uniform({value_heads}, std::log(kLowStep), std::log(kHighStep)));
      add(at + "dt_bias", torch::log(torch::expm1(step)));
      add(at + "A_log", torch::log(uniform({value_heads}, kLowA, kHighA)));
      // The gated RMSNorm scales by its weight (not 1 + weight): 1 keeps each head's output at unit RMS.
      add(at + "norm.weight", torch::ones({o.linear_value_head_dim}));
      add(at + "out_proj.weight", normal({hidden, value_dim}, fan_in(value_dim)));
    } else {
      const std::string at = layer + "self_attn.";
      // Each head's query followed by its output gate's logits.
      add(at + "q_proj.weight", normal({2 * o.num_heads * head_dim, hidden}, fan_in(hidden)));
      add(at + "k_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in(hidden)));
      add(at + "v_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in(hidden)));
      add(at + "o_proj.weight", normal({hidden, o.num_heads * head_dim}, fan_in(o.num_heads * head_dim)));
      add(at + "q_norm.weight", torch::full({head_dim}, kQKNormWeight));
      add(at + "k_norm.weight", torch::full({head_dim}, kQKNormWeight));
    }
    // Zero-centred (the norm scales by 1 + weight): a scale of 1.
    add(layer + "input_layernorm.weight", torch::zeros({hidden}));
    add(layer + "post_attention_layernorm.weight", torch::zeros({hidden}));
    add_mlp(o, i, layer, normal, normal, 1.0, add);
  }
}

}  // namespace dflow::target::tiny
