// DSpark (arXiv 2607.05147; vllm-project/speculators `models/dspark`): the
// DFlash backbone with a Markov head (a low-rank logit bias from the
// previous token) and a confidence head (each slot's acceptance), the
// `model.drafter.kind: dspark`. Its kind (kind.cpp) registers both; this
// header is what its files and its tests share.
//
// Semantics: dflow's blocks are DFlash's (speculators' sample_from_anchor =
// false): slot 0 holds the anchor and is never predicted, slot k >= 1
// predicts the token at anchor + k, and its Markov bias comes from the token
// just before it, at anchor + k - 1 (the anchor itself for slot 1). Training
// uses the data's token there; drafting the token chosen at slot k - 1.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

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

// The heads' fields under speculators' names (markov_rank,
// markov_head_type, enable_confidence_head, confidence_head_with_markov),
// as both export layouts and checkpoints write them: empty without heads;
// confidence_head_with_markov is false without a confidence head (the flag
// only shapes that head's input).
nlohmann::json dspark_fields(const DraftHeads& heads);
// Back from those fields (absent ones at their defaults). Throws
// std::invalid_argument naming the key.
DraftHeads dspark_heads(const nlohmann::json& fields);
// The drafter's shape with these heads: kind "dspark", or "dflash" without any.
void set_dspark_heads(DrafterSpec& spec, const DraftHeads& heads);
void set_dspark_heads(DrafterOptions& options, const DraftHeads& heads);
// A drafter's heads (none for another kind).
DraftHeads dspark_heads(const DrafterSpec& spec);

// The Markov head's recurrent state while drafting one block (rnn only:
// [K, r]; undefined before the first slot and for the stateless variants).
struct MarkovState {
  torch::Tensor state;
};

// Parameter names are speculators' (markov_head.markov_w1.weight, ...), so
// the export is a rename-free copy.
class MarkovHeadImpl : public torch::nn::Module {
 public:
  MarkovHeadImpl(const DrafterSpec& spec, const DraftHeads& heads);
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

// A DSpark drafter's heads, as its kind registered them on the drafter.
class DSparkModules;
DSparkModules& dspark_modules(DFlashDrafterImpl& drafter);  // throws for a drafter of another kind
MarkovHeadImpl* markov_head(DFlashDrafterImpl& drafter);          // null without one
ConfidenceHeadImpl* confidence_head(DFlashDrafterImpl& drafter);  // null without one
// The confidence head's input for slots: hidden [..., H] and, with
// confidence_with_markov, prev_embedding [..., r] (W1 of the previous
// token) -> acceptance logits [...]. Throws without a confidence head.
torch::Tensor confidence_logits(DFlashDrafterImpl& drafter, const torch::Tensor& hidden,
                                const torch::Tensor& prev_embedding);

}  // namespace dflow::drafter
