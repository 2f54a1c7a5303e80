// Hugging Face config.json for the supported decoder families: dense Qwen3,
// Qwen2 and Llama, the mixture-of-experts Qwen3-MoE and gpt-oss, and the
// hybrid Qwen3.5/3.6 text models (dense and MoE) of their multimodal wrappers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dflow::target {

// Qwen3_5 / Qwen3_5Moe: the text model of Qwen3_5ForConditionalGeneration /
// Qwen3_5MoeForConditionalGeneration (its text_config, its tensors under
// model.language_model.; the vision tower is never read).
enum class ModelFamily { Qwen3, Qwen2, Llama, Qwen3Moe, GptOss, Qwen3_5, Qwen3_5Moe };
std::string to_string(ModelFamily family);

// How a family's RMSNorm applies its weight (target/target.hpp family_rms_norm).
enum class NormStyle {
  ScaleAfterCast,  // weight * (the normed x cast back to x's dtype): Qwen3, Qwen2, Llama, Qwen3-MoE, Qwen3-VL, Llama 4
  ScaleWide,       // weight * normed x in float32, then cast back: gpt-oss
  OnePlusWeight,   // normed x * (1 + weight) in float32, then cast back (a zero-centred weight): Qwen3.5/3.6
  Unknown,         // an architecture dflow does not know: refused where the norm is applied (the kl teacher)
};

// Routed experts (target/moe.hpp). num_experts 0: every layer is dense.
struct MoeConfig {
  int64_t num_experts = 0;               // qwen3_moe num_experts, gpt_oss num_local_experts
  int64_t experts_per_token = 0;         // num_experts_per_tok
  int64_t expert_intermediate_size = 0;  // qwen3_moe moe_intermediate_size, gpt_oss intermediate_size
  bool norm_topk_prob = false;           // qwen3_moe: renormalise the top-k probabilities (qwen3_5_moe: always)
  // qwen3_5_moe: a shared expert of this width beside the routed ones on
  // every sparse layer, its output scaled by sigmoid(shared_expert_gate(x)).
  int64_t shared_expert_intermediate_size = 0;
  // Per decoder layer: true where the MLP is routed experts (qwen3_moe:
  // decoder_sparse_step and mlp_only_layers; gpt_oss: every layer), false
  // where it is the dense SwiGLU of intermediate_size.
  std::vector<bool> sparse_layers;
  double swiglu_alpha = 1.702;  // gpt_oss's clamped SwiGLU
  double swiglu_limit = 0.0;    // gpt_oss swiglu_limit (7.0); 0: the plain SwiGLU
  bool mxfp4 = false;           // gpt_oss quantization_config quant_method mxfp4: experts as *_blocks/*_scales
  bool sparse(int64_t layer) const {
    return num_experts > 0 && layer >= 0 && layer < static_cast<int64_t>(sparse_layers.size()) &&
           sparse_layers[static_cast<size_t>(layer)];
  }
};

// A hybrid stack's per-layer token mixer (qwen3_5 layer_types).
enum class LayerKind { full_attention, linear_attention };

// Gated DeltaNet's sizes (qwen3_5 linear_* keys): heads of the keys (and
// queries) and of the values, their widths, and the causal depthwise conv's
// kernel over q, k and v.
struct LinearAttentionConfig {
  int64_t num_key_heads = 0, num_value_heads = 0, key_head_dim = 0, value_head_dim = 0, conv_kernel = 0;
  int64_t key_dim() const { return num_key_heads * key_head_dim; }
  int64_t value_dim() const { return num_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // the conv's channels: q, k, v
};

// RoPE frequency scaling: "default" (none) or "yarn" (gpt_oss).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;  // yarn: round the correction range to integers (transformers' default)
};

struct HFConfig {
  ModelFamily family = ModelFamily::Qwen3;
  std::string model_type;                 // e.g. "qwen3"
  std::vector<std::string> architectures;  // e.g. ["Qwen3ForCausalLM"]
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool attention_bias = false;         // q/k/v projections have biases (always for Qwen2)
  bool attention_output_bias = false;  // o_proj has a bias (never for Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  bool tie_word_embeddings = false;
  NormStyle norm = NormStyle::ScaleAfterCast;
  RopeScaling rope_scaling;
  // Per decoder layer: the sliding window in tokens (a query sees itself and
  // the window - 1 tokens before it), 0 for full attention (gpt_oss
  // layer_types). Empty: every layer is full.
  std::vector<int64_t> sliding_window_per_layer;
  bool attention_sinks = false;  // gpt_oss: a learned per-head logit in every softmax
  // The leading dims of each head RoPE rotates (qwen3_5: head_dim *
  // partial_rotary_factor); the rest pass through. 0: the whole head.
  int64_t rotary_dim = 0;
  // qwen3_5: q_proj also gives a per-channel gate, the attention's output
  // times sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  // Per decoder layer (qwen3_5 layer_types); empty: every layer full attention.
  std::vector<LayerKind> layer_kinds;
  LinearAttentionConfig linear;
  // Where the text model's tensors live: "model." ("model.language_model."
  // in a multimodal wrapper); lm_head.weight is at the top either way.
  std::string tensor_prefix = "model.";
  MoeConfig moe;
  std::vector<int64_t> eos_token_ids;
  // From `dflow_mask_token_id` or `dflash_config.mask_token_id`.
  std::optional<int64_t> mask_token_id;
  // True for an exported DFlash drafter (architectures ["DFlashDraftModel"]).
  bool is_dflash_drafter = false;

  int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
  bool linear_attention(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_kinds.size()) &&
           layer_kinds[static_cast<size_t>(layer)] == LayerKind::linear_attention;
  }
  bool has_linear_attention() const {
    for (int64_t l = 0; l < num_hidden_layers; ++l)
      if (linear_attention(l)) return true;
    return false;
  }
  int64_t sliding_window(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(sliding_window_per_layer.size())
               ? sliding_window_per_layer[static_cast<size_t>(layer)]
               : 0;
  }
};

// Parses and validates; `source` names the file in error messages.
// Refuses unsupported families and any rope scaling, naming them.
HFConfig parse_hf_config(const nlohmann::json& json, const std::string& source);

// The family config.model_type and config.architectures name (setting
// is_dflash_drafter for a DFlash drafter's); throws naming `source` and the
// names when they name none dflow knows, or two.
ModelFamily detect_family(HFConfig& config, const std::string& source);

// eos_token_id (an id or a list) and the mask token id into `config`.
void read_hf_special_tokens(const nlohmann::json& json, HFConfig& config);

// `path` is a config.json or a directory holding one.
HFConfig load_hf_config(const std::filesystem::path& path);

// What the drafter needs from a target it does not run (target/hf_head_config.cpp):
// sizes, vocabulary, tying, eos ids, rms_norm_eps, rope_theta, layer count,
// read from any decoder's config.json, whether or not dflow can run the
// family. Runnable means parse_hf_config accepts the config: a family added
// there becomes runnable here with no other change.
struct HeadConfig : HFConfig {
  // architectures[0] ("GptOssForCausalLM"), or model_type without architectures.
  std::string architecture;
  // Why dflow cannot run the whole target: parse_hf_config's refusal without
  // its file prefix (the family, or a key and value such as a rope scaling
  // type). "" when it can. `family` is the one the names give either way (an
  // FP8 gpt-oss is gpt-oss: its norms' numerics follow it); Qwen3 when they
  // name none dflow knows (`norm` is then NormStyle::Unknown).
  std::string not_runnable_because;
  // A multimodal wrapper's text model type (text_config.model_type, e.g.
  // "qwen3_5_moe_text"): the sizes above are its text_config's. "" for a
  // plain decoder config.
  std::string text_model_type;
  bool runnable() const { return not_runnable_because.empty(); }
  bool wrapper() const { return !text_model_type.empty(); }
};

// Refuses a DFlash drafter's config and a key the drafter needs that is
// missing or not a positive integer, naming `source` and the key. A
// multimodal wrapper (a config with a text_config: Qwen3.5/3.6, Qwen3-VL,
// Llama 4) gives its text model's sizes, never runnable; its text config may
// lack a dense intermediate_size (a mixture of experts: 0, the drafter's
// model.drafter.intermediate_size decides). Gemma 3 is refused: it scales its
// embedding by sqrt(hidden_size), which the drafter's frozen embedding does not.
HeadConfig parse_head_config(const nlohmann::json& json, const std::string& source);
HeadConfig load_head_config(const std::filesystem::path& path);  // a config.json or its directory
// The head config of a config dflow runs (TargetModel::head()).
HeadConfig runnable_head_config(const HFConfig& config);
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace dflow::target
