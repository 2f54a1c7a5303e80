// Routed experts of the mixture-of-experts targets (Qwen3-MoE, gpt-oss), as
// Hugging Face computes them: a router picks top-k experts per token, each
// picked expert's gated MLP runs on the token, and the outputs are summed
// with the routing weights. Computed grouped by expert: the tokens routed to
// one expert go through it in one matrix product, the whole micro-batch at
// once (no loop over tokens).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace dflow::model {

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

// Stacked weights of one layer's experts, in one layout for both families
// (the loaders convert: gpt-oss's interleaved [E, H, 2I] gate_up_proj is
// de-interleaved and transposed, MXFP4 blocks are dequantized).
struct ExpertWeights {
  torch::Tensor router;        // [E, H]
  torch::Tensor router_bias;   // [E], or undefined
  torch::Tensor gate_up;       // [E, 2I, H]: rows [0, I) the gate, [I, 2I) up
  torch::Tensor gate_up_bias;  // [E, 2I], or undefined
  torch::Tensor down;          // [E, H, I]
  torch::Tensor down_bias;     // [E, H], or undefined
  bool defined() const { return router.defined(); }
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

}  // namespace dflow::model
