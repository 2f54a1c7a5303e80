// The DFlash drafter (docs/dflash.md): context features of n target layers
// -> fc -> hidden_norm, injected as extra keys/values into every draft layer
// (Qwen3 decoder layers at the target's width); the block of draft slots is
// denoised in one non-causal pass; final norm; the target's frozen lm_head.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "drafter/block_attention.hpp"
#include "target/hf_config.hpp"
#include "target/layers.hpp"

namespace dflow::drafter {

struct DrafterSpec {
  // Width and attention shape, copied from the target config.
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool attention_bias = false;
  // DFlash shape.
  int64_t num_layers = 1;
  int64_t block_size = 16;
  int64_t num_target_layers = 0;
  std::vector<int64_t> target_layer_ids;  // n feature layers of the target
  int64_t mask_token_id = -1;
  // Per draft layer "full_attention" or "sliding_attention" (empty: all
  // full). A sliding layer's query at position p sees context positions
  // p - sliding_window < c < anchor (add_sliding_window); its block whole.
  std::vector<std::string> layer_types;
  int64_t sliding_window = 0;  // > 0 exactly when some layer slides
  // The drafter kind (drafter/kind.hpp: model.drafter.kind) and
  // the fields its params give, under the names its config.json carries.
  std::string kind = "dflash";
  nlohmann::json kind_fields = nlohmann::json::object();

  int64_t num_features() const { return static_cast<int64_t>(target_layer_ids.size()); }
  // sliding_window for a sliding layer, 0 (full attention) otherwise.
  int64_t layer_window(int64_t layer) const;
  bool any_sliding() const;
  // Throws naming the first inconsistent field.
  void validate() const;
  void validate_layer_types() const;
};

struct DrafterOptions {
  int64_t num_layers = 1;
  int64_t block_size = 16;
  int64_t num_target_features = 0;            // 0: as many as draft layers (the public default)
  std::vector<int64_t> target_layer_ids;      // explicit ids override num_target_features
  std::optional<int64_t> mask_token_id;       // default: the target config's mask token id
  std::vector<std::string> layer_types;       // empty: all full_attention
  int64_t sliding_window = 0;                 // for the sliding_attention layers
  int64_t intermediate_size = 0;              // 0: the target's; 3 x hidden_size when it has none
  std::string kind = "dflash";                // the drafter kind and its fields (DrafterSpec's)
  nlohmann::json kind_fields = nlohmann::json::object();
};

// Refuses a missing mask token or one outside the target vocabulary. A
// target without a dense MLP width (intermediate_size 0: a mixture of
// experts' text config) gives the draft layers 3 x hidden_size unless
// options.intermediate_size sets it, and logs the choice.
DrafterSpec make_drafter_spec(const target::HFConfig& target_config, const DrafterOptions& options);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x) { return target::rms_norm(x, weight, eps_); }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Keys and values of one draft layer over the context (after k_norm, RoPE).
struct ContextKV {
  torch::Tensor keys;    // [B, KVH, S, D]
  torch::Tensor values;  // [B, KVH, S, D]
};

class DraftAttentionImpl : public torch::nn::Module {
 public:
  // Layer `layer` of the spec: full or sliding attention by its layer type.
  DraftAttentionImpl(const DrafterSpec& spec, int64_t layer);
  // context [B, S, H] at positions 0..S-1 -> that layer's context K/V.
  ContextKV project_context(const torch::Tensor& context, const target::RotaryTables& context_rotary);
  // x [B, Q, H] (already input_layernorm'ed) -> [B, Q, H] after o_proj.
  torch::Tensor forward(const torch::Tensor& x, const ContextKV& context_kv, const target::RotaryTables& draft_rotary,
                        const BlockAttentionPlan& plan);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) const;  // [B, T, heads*D] -> [B, heads, T, D]
  int64_t num_heads_, num_kv_heads_, head_dim_;
  int64_t sliding_window_;  // 0: full attention
};
TORCH_MODULE(DraftAttention);

class DraftMLPImpl : public torch::nn::Module {
 public:
  explicit DraftMLPImpl(const DrafterSpec& spec);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DraftMLP);

class KindModules;

class DraftLayerImpl : public torch::nn::Module {
 public:
  DraftLayerImpl(const DrafterSpec& spec, int64_t layer);
  torch::Tensor forward(const torch::Tensor& hidden, const ContextKV& context_kv,
                        const target::RotaryTables& draft_rotary, const BlockAttentionPlan& plan);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  DraftAttention self_attn{nullptr};
  DraftMLP mlp{nullptr};
  // The drafter's kind, which runs each sublayer (KindModules::sublayer);
  // null: the backbone's own.
  KindModules* kind = nullptr;
  int64_t index = 0;
};
TORCH_MODULE(DraftLayer);

class DFlashDrafterImpl : public torch::nn::Module {
 public:
  // Parameters on CPU in float32, initialised from `init_seed`:
  // normal(0, 0.02) for linear weights, zeros for biases, ones for norms.
  DFlashDrafterImpl(DrafterSpec spec, uint64_t init_seed);

  const DrafterSpec& spec() const { return spec_; }

  // fc + hidden_norm: features [B, S, n*H] -> context [B, S, H].
  torch::Tensor project_features(const torch::Tensor& context_features);

  // Hidden states of every draft slot after the final norm, [B, N*Bs, H].
  // block_embeddings [B, N*Bs, H]: target embeddings of the block tokens;
  // block_positions [B, N*Bs]: absolute positions (anchor + 0 .. Bs-1).
  // Context entries sit at positions 0 .. S-1.
  // recompute_layers: keep only each layer's inputs from the forward pass
  // and run the layer again in backward (recomputed_layer); same outputs and
  // gradients, a fraction of the activation memory, one more forward.
  torch::Tensor forward(const torch::Tensor& context_features, const torch::Tensor& block_embeddings,
                        const torch::Tensor& block_positions, const BlockAttentionPlan& plan,
                        bool recompute_layers = false);
  // Packed rows: context entry t sits at context_positions [B, S] (its
  // position within its own sample), block positions likewise.
  torch::Tensor forward(const torch::Tensor& context_features, const torch::Tensor& context_positions,
                        const torch::Tensor& block_embeddings, const torch::Tensor& block_positions,
                        const BlockAttentionPlan& plan, bool recompute_layers = false);

  // The same pass over context K/V projected earlier (a drafting cache).
  torch::Tensor forward_with_context_kv(const std::vector<ContextKV>& context_kv_per_layer,
                                        const torch::Tensor& block_embeddings, const torch::Tensor& block_positions,
                                        const BlockAttentionPlan& plan);
  // Per-layer context K/V for context [B, T, H] (from project_features) at
  // positions first_position .. first_position + T - 1.
  std::vector<ContextKV> context_kv(const torch::Tensor& context, int64_t first_position);
  // The same at explicit positions [T] or [B, T].
  std::vector<ContextKV> context_kv(const torch::Tensor& context, const torch::Tensor& positions);

  // What the drafter's kind added to the backbone (drafter/kind.hpp).
  KindModules& kind_modules() { return *kind_modules_; }

  torch::nn::Linear fc{nullptr};
  RMSNorm hidden_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  // The draft layers over context [B, S, H] at `context_positions` ([S] or [B, S]).
  torch::Tensor run_layers(const torch::Tensor& context, const torch::Tensor& context_positions,
                           const torch::Tensor& block_embeddings, const torch::Tensor& block_positions,
                           const BlockAttentionPlan& plan, bool recompute_layers);
  void check_blocks(const torch::Tensor& block_embeddings, const torch::Tensor& block_positions) const;

  DrafterSpec spec_;
  std::shared_ptr<KindModules> kind_modules_;
};
TORCH_MODULE(DFlashDrafter);

// One draft layer, its context K/V projection included, whose activations
// are recomputed in backward (drafter/layer_recompute.cpp) rather than kept:
// the output and every gradient (hidden, context, the layer's parameters)
// are those of self_attn->project_context + layer.forward. Without grad
// mode it is just that forward.
torch::Tensor recomputed_layer(DraftLayerImpl& layer, const torch::Tensor& hidden, const torch::Tensor& context,
                               const target::RotaryTables& context_rotary, const target::RotaryTables& draft_rotary,
                               const BlockAttentionPlan& plan);

// Saves model.safetensors (parameters under their public names, in their
// current dtype) and config.json (a Qwen3 config with DFlash fields) into
// `dir`, each written to a temporary name and renamed.
void save_pretrained(DFlashDrafterImpl& drafter, const std::filesystem::path& dir);
// Loads a directory written by save_pretrained (or a public DFlash export):
// parameters on CPU in the checkpoint's dtype; refuses missing, unexpected
// or misshapen tensors, naming them.
DFlashDrafter load_pretrained(const std::filesystem::path& dir);
nlohmann::json drafter_config_json(const DrafterSpec& spec, torch::Dtype dtype);
DrafterSpec drafter_spec_from_config(const nlohmann::json& config, const std::string& source);

}  // namespace dflow::drafter
