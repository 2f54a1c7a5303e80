// XPress (vllm-project/speculators `models/xpress`): the DFlash backbone
// with a causal low-rank refiner that adds a bias to each slot's draft
// logits from the token before the slot, the slot's hidden state and the
// block's mean hidden state, mixed causally across the block. Training
// takes one teacher-forced pass (the data's previous tokens) and a few
// consistency rounds, each fed the argmax of the round before (the first
// the backbone's own), and holds the backbone's logits to the target (the
// base anchor term); drafting resolves a block in a few parallel Jacobi
// passes. `model.drafter.kind: xpress`; its kind (kind.cpp) registers
// the refiner; this header is what its files and its tests share.
//
// Blocks are DFlash's (speculators' sample_from_anchor = false): slot 0
// holds the anchor; slot k's previous token is the one at anchor + k - 1,
// slot 0's the token before the anchor (the anchor's own at the start of
// its sample).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

// The shape fields, under speculators' config names.
struct XPressShape {
  int64_t xpress_rank = 256;      // the refiner's width r (embedding, fuse, mixer and MLP)
  int64_t xpress_mlp_ratio = 2;   // the refiner's SwiGLU width is r * ratio
  int64_t num_jacobi_passes = 6;  // refine passes when drafting a block (0: the backbone's argmax)

  // Throws std::invalid_argument naming the first bad field.
  void validate() const;
};

nlohmann::json xpress_fields(const XPressShape& shape);
// Absent fields at speculators' defaults; throws std::invalid_argument naming the key.
XPressShape xpress_shape(const nlohmann::json& fields);

// speculators' XPressRefinerHead: bias = readout(x), x from the previous
// tokens and the block's hidden states (refine), the bias's features.
class RefinerHeadImpl : public torch::nn::Module {
 public:
  RefinerHeadImpl(int64_t vocab_size, int64_t hidden_size, int64_t block_size, const XPressShape& shape);
  // What every pass shares: [down_h(h) ; down_g(mean of h over the block)], hidden [N, Bs, H] -> [N, Bs, 2r].
  torch::Tensor hidden_cache(const torch::Tensor& hidden);
  // The features x [N, Bs, r] of previous tokens prev [N, Bs] (int64) on hidden_cache's.
  torch::Tensor features(const torch::Tensor& prev, const torch::Tensor& cache);

  torch::nn::Embedding token_embed{nullptr};
  torch::nn::Linear down_h{nullptr}, down_g{nullptr}, in_proj{nullptr};
  torch::Tensor mix_l;  // [r, Bs, Bs]: slot k mixes slots j <= k, channel by channel (starts at zero)
  torch::nn::Linear mlp_gate{nullptr}, mlp_up{nullptr}, mlp_down{nullptr}, readout{nullptr};
};
TORCH_MODULE(RefinerHead);

// An XPress drafter's refiner (throws for a drafter of another kind).
RefinerHeadImpl& refiner_head(DFlashDrafterImpl& drafter);

}  // namespace dflow::drafter
