// The DFlash drafter (docs/dflash.md): context features of n target layers
// -> fc -> hidden_norm, injected as extra keys/values into every draft layer
// (Qwen3 decoder layers at the target's width); the block of draft slots is
// denoised in one non-causal pass; final norm; the target's frozen lm_head.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/block_attention.hpp"
#include "model/hf_config.hpp"
#include "model/layers.hpp"

namespace dflow::model {

// DSpark's two small heads over the DFlash backbone (arXiv 2607.05147;
// vllm-project/speculators `models/dspark`), both off by default (plain DFlash).
// Semantics: dflow's blocks are DFlash's (speculators' sample_from_anchor =
// false): slot 0 holds the anchor and is never predicted, slot k >= 1
// predicts the token at anchor + k, and its Markov bias comes from the token
// just before it, at anchor + k - 1 (the anchor itself for slot 1). Training
// uses the data's token there; drafting the token chosen at slot k - 1.
struct DraftHeads {
  // Markov head: a low-rank logit bias W2 u from the previous token, with
  // u = W1[prev] (vanilla), sigmoid(gate([h; W1[prev]])) * W1[prev] (gated),
  // or tanh(out) of a recurrent state over the block (rnn). 0: no head.
  int64_t markov_rank = 0;
  std::string markov_type = "vanilla";  // vanilla | gated | rnn
  // Confidence head: a linear map of the slot's hidden state (and the
  // Markov embedding W1[prev] when confidence_with_markov) to the logit of
  // the slot's acceptance probability.
  bool confidence = false;
  bool confidence_with_markov = true;  // needs markov_rank > 0

  bool markov() const { return markov_rank > 0; }
  bool any() const { return markov() || confidence; }
  // Throws std::invalid_argument naming the first bad field.
  void validate() const;
  bool operator==(const DraftHeads&) const = default;
};

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
  DraftHeads heads;            // DSpark heads (none: plain DFlash)

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
  DraftHeads heads;                           // DSpark heads (none: plain DFlash)
};

// Refuses a missing mask token or one outside the target vocabulary.
DrafterSpec make_drafter_spec(const HFConfig& target_config, const DrafterOptions& options);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x) { return rms_norm(x, weight, eps_); }
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
  ContextKV project_context(const torch::Tensor& context, const RotaryTables& context_rotary);
  // x [B, Q, H] (already input_layernorm'ed) -> [B, Q, H] after o_proj.
  torch::Tensor forward(const torch::Tensor& x, const ContextKV& context_kv, const RotaryTables& draft_rotary,
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

class DraftLayerImpl : public torch::nn::Module {
 public:
  DraftLayerImpl(const DrafterSpec& spec, int64_t layer);
  torch::Tensor forward(const torch::Tensor& hidden, const ContextKV& context_kv, const RotaryTables& draft_rotary,
                        const BlockAttentionPlan& plan);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  DraftAttention self_attn{nullptr};
  DraftMLP mlp{nullptr};
};
TORCH_MODULE(DraftLayer);

// The Markov head's recurrent state while drafting one block (rnn only:
// [K, r]; undefined before the first slot and for the stateless variants).
struct MarkovState {
  torch::Tensor state;
};

// Parameter names are speculators' (markov_head.markov_w1.weight, ...), so
// the export is a rename-free copy.
class MarkovHeadImpl : public torch::nn::Module {
 public:
  MarkovHeadImpl(const DrafterSpec& spec);
  // W1 rows of token ids (any shape) -> [..., r].
  torch::Tensor prev_embeddings(const torch::Tensor& token_ids);
  // The input of W2 for whole blocks: prev_tokens [K, Bs] (slot k's previous
  // token), hidden [K, Bs, H] (the backbone's, after its final norm) ->
  // u [K, Bs, r]; rnn runs its state from slot 0 to Bs - 1.
  torch::Tensor block_features(const torch::Tensor& prev_tokens, const torch::Tensor& hidden);
  // One slot while drafting: prev_token [K], hidden [K, H] -> u [K, r],
  // advancing `state` (rnn). Slot by slot from slot 0 this gives
  // block_features' rows exactly.
  torch::Tensor step_features(const torch::Tensor& prev_token, const torch::Tensor& hidden, MarkovState& state);
  // W2 u: [..., r] -> [..., V].
  torch::Tensor bias(const torch::Tensor& features) { return markov_w2->forward(features); }

  torch::nn::Embedding markov_w1{nullptr};  // [V, r]
  torch::nn::Linear markov_w2{nullptr};     // r -> V, no bias
  torch::nn::Linear gate_proj{nullptr};     // gated: H + r -> r
  torch::nn::Linear joint_proj{nullptr};    // rnn: 2r + H -> 3r ([gate; candidate; output])

 private:
  std::string type_;
  int64_t rank_;
};
TORCH_MODULE(MarkovHead);

class ConfidenceHeadImpl : public torch::nn::Module {
 public:
  explicit ConfidenceHeadImpl(int64_t input_dim);
  // features [..., input_dim] -> acceptance logits [...].
  torch::Tensor forward(const torch::Tensor& features) { return proj->forward(features).squeeze(-1); }
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(ConfidenceHead);

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

  // The confidence head's input for slots: hidden [..., H] and, with
  // confidence_with_markov, prev_embedding [..., r] (W1 of the previous
  // token) -> acceptance logits [...]. Needs spec().heads.confidence.
  torch::Tensor confidence_logits(const torch::Tensor& hidden, const torch::Tensor& prev_embedding);

  torch::nn::Linear fc{nullptr};
  RMSNorm hidden_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  MarkovHead markov_head{nullptr};          // null unless spec().heads.markov()
  ConfidenceHead confidence_head{nullptr};  // null unless spec().heads.confidence

 private:
  // The draft layers over context [B, S, H] at `context_positions` ([S] or [B, S]).
  torch::Tensor run_layers(const torch::Tensor& context, const torch::Tensor& context_positions,
                           const torch::Tensor& block_embeddings, const torch::Tensor& block_positions,
                           const BlockAttentionPlan& plan, bool recompute_layers);
  void check_blocks(const torch::Tensor& block_embeddings, const torch::Tensor& block_positions) const;

  DrafterSpec spec_;
};
TORCH_MODULE(DFlashDrafter);

// One draft layer, its context K/V projection included, whose activations
// are recomputed in backward (model/layer_recompute.cpp) rather than kept:
// the output and every gradient (hidden, context, the layer's parameters)
// are those of self_attn->project_context + layer.forward. Without grad
// mode it is just that forward.
torch::Tensor recomputed_layer(DraftLayerImpl& layer, const torch::Tensor& hidden, const torch::Tensor& context,
                               const RotaryTables& context_rotary, const RotaryTables& draft_rotary,
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

}  // namespace dflow::model
