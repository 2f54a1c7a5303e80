// DFlash2 (vllm-project/speculators `models/dflash2`, after z-lab's
// dflash): the DFlash backbone with a local dynamic convolution around
// each draft layer's attention and MLP (within the block, causal, the
// kernel of each group of channels drawn from the slot's own hidden
// state), and a bilinear candidate selector that reranks the LM head's
// top-k at each slot from the token before it. The drafter node's
// `model.drafter.kind: dflash2`; its kind (kind.cpp) registers both; this header is what
// its files and its tests share.
//
// Blocks are DFlash's (speculators' sample_from_anchor = false): slot 0
// holds the anchor; slot k's predecessor is the token at anchor + k - 1
// (training: the data's; drafting: the one chosen at slot k - 1, the bonus
// for slot 1).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

// The shape fields, under speculators' config names.
struct DFlash2Shape {
  int64_t conv_kernel_size = 2;   // causal taps of each convolution (1 .. block_size)
  int64_t conv_group_size = 16;   // hidden channels sharing one dynamic kernel (divides hidden_size)
  int64_t selector_rank = 256;    // rank of the selector's codebooks
  int64_t selector_top_k = 16;    // unary candidates reranked (<= vocabulary)
  bool sliding_window_non_causal = true;  // dflow's blocks are whole in every layer

  // Throws std::invalid_argument naming the first bad field.
  void validate() const;
  // Against the drafter's shape (hidden size, block size, vocabulary).
  void validate_for(const DrafterSpec& spec) const;
};

nlohmann::json dflash2_fields(const DFlash2Shape& shape);
// Absent fields at speculators' defaults; throws std::invalid_argument naming the key.
DFlash2Shape dflash2_shape(const nlohmann::json& fields);

// Input and output convolutions of one sublayer, from one projection of its
// input: speculators' GroupedDynamicCausalConv (base_kernel [2, K, H],
// kernel_projection H -> 2 K G), starting as the identity.
class GroupedDynamicConvImpl : public torch::nn::Module {
 public:
  GroupedDynamicConvImpl(int64_t hidden_size, int64_t block_size, const DFlash2Shape& shape);
  void reset();  // identity: base tap 0 ones, the rest and the projection zero
  // x [B, Q, H] (whole blocks) -> the convolved input and the output side's dynamic kernel.
  std::pair<torch::Tensor, torch::Tensor> prepare(const torch::Tensor& x);
  torch::Tensor finish(const torch::Tensor& y, const torch::Tensor& output_kernel);

  torch::Tensor base_kernel;
  torch::nn::Linear kernel_projection{nullptr};

 private:
  torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& base) const;
  int64_t block_size_, kernel_size_, group_size_, groups_;
};
TORCH_MODULE(GroupedDynamicConv);

// speculators' CandidateSelector: score(c | prev, h) = unary(c) +
// <predecessor_codebook[prev] * hidden_projection(h), successor_codebook[c]>.
class CandidateSelectorImpl : public torch::nn::Module {
 public:
  CandidateSelectorImpl(int64_t vocab_size, int64_t hidden_size, int64_t rank);
  // unary [..., K], hidden [..., H], prev [...] int64, candidates [..., K] int64 -> [..., K].
  torch::Tensor scores(const torch::Tensor& unary, const torch::Tensor& hidden, const torch::Tensor& prev,
                       const torch::Tensor& candidates);

  torch::Tensor predecessor_codebook, successor_codebook;  // [V, r]
  torch::nn::Linear hidden_projection{nullptr};             // H -> r
};
TORCH_MODULE(CandidateSelector);

// A DFlash2 drafter's modules (throws for a drafter of another kind).
CandidateSelectorImpl& candidate_selector(DFlashDrafterImpl& drafter);
GroupedDynamicConvImpl& sublayer_conv(DFlashDrafterImpl& drafter, int64_t layer, bool attention);

}  // namespace dflow::drafter
