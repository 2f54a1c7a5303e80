// Routed experts of the mixture-of-experts targets (Qwen3-MoE, gpt-oss), as
// Hugging Face computes them: a router picks top-k experts per token, each
// picked expert's gated MLP runs on the token, and the outputs are summed
// with the routing weights. Computed grouped by expert: the tokens routed to
// one expert go through it in one matrix product, the whole micro-batch at
// once (no loop over tokens).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace dflow::target {

enum class ExpertRouter {
  // Qwen3-MoE: softmax over all experts in float32, then top-k of the
  // probabilities (renormalised to sum 1 when normalize_top_k).
  softmax_then_top_k,
  // gpt-oss: top-k of the router logits (with the router's bias), then a
  // softmax over those k.
  top_k_then_softmax,
};

enum class ExpertActivation {
  swiglu,          // down(silu(gate) * up)
  clamped_swiglu,  // gpt-oss: gate <= limit, |up| <= limit, down((up + 1) * gate * sigmoid(alpha * gate))
};

// How a checkpoint's MXFP4 experts (gpt-oss) are held once loaded.
enum class Mxfp4Experts {
  // As the checkpoint packs them (uint8 blocks and scales, about 4.25 bits a
  // weight), each expert dequantized only while it computes: gpt-oss-120b's
  // experts in about 61 GB instead of 229 GB of bf16.
  resident,
  // Dequantized once, on load, into the target's dtype (faster per forward;
  // four times the memory in bf16).
  dequantize,
};

// Stacked weights of one layer's experts, in one layout for both families
// (the loaders convert: gpt-oss's interleaved [E, H, 2I] gate_up_proj is
// de-interleaved and transposed). The two projections are held either
// dequantized (gate_up, down) or, for MXFP4 checkpoints kept resident, packed
// (the *_blocks / *_scales, rows in the same order as gate_up's and down's:
// MXFP4 blocks run along the input axis, so reordering rows is exact), never
// both. routed_experts dequantizes a packed expert with target/mxfp4.hpp's
// mxfp4_dequantize into `packed_dtype`, the very function and dtype the
// load-time dequantization uses, so both forms give the same bits.
struct ExpertWeights {
  torch::Tensor router;        // [E, H]
  torch::Tensor router_bias;   // [E], or undefined
  torch::Tensor gate_up;       // [E, 2I, H]: rows [0, I) the gate, [I, 2I) up; undefined when packed
  torch::Tensor gate_up_bias;  // [E, 2I], or undefined
  torch::Tensor down;          // [E, H, I]; undefined when packed
  torch::Tensor down_bias;     // [E, H], or undefined
  torch::Tensor gate_up_blocks;  // [E, 2I, H / 32, 16] uint8, or undefined
  torch::Tensor gate_up_scales;  // [E, 2I, H / 32] uint8
  torch::Tensor down_blocks;     // [E, H, I / 32, 16] uint8
  torch::Tensor down_scales;     // [E, H, I / 32] uint8
  torch::Dtype packed_dtype = torch::kFloat32;  // what packed experts dequantize to
  bool defined() const { return router.defined(); }
  bool packed() const { return gate_up_blocks.defined(); }
  int64_t num_experts() const { return router.size(0); }
  int64_t hidden_size() const { return router.size(1); }
  int64_t intermediate_size() const { return packed() ? down_blocks.size(2) * 32 : down.size(2); }
  // Bytes the two projections hold on their device, in whichever form (the
  // router and biases, the same in both, not counted).
  int64_t projection_bytes() const;
};

struct ExpertOptions {
  ExpertRouter router = ExpertRouter::softmax_then_top_k;
  int64_t top_k = 1;
  bool normalize_top_k = false;
  ExpertActivation activation = ExpertActivation::swiglu;
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
};

// x [..., H] -> [..., H], in x's dtype.
torch::Tensor routed_experts(const torch::Tensor& x, const ExpertWeights& weights, const ExpertOptions& options);

}  // namespace dflow::target
