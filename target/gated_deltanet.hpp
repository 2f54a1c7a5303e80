// Gated DeltaNet, the linear-attention token mixer of the Qwen3.5/3.6 text
// models, as transformers 5.24 computes it in its torch fallback
// (Qwen3_5GatedDeltaNet with torch_chunk_gated_delta_rule): in-projections of
// q, k, v (one fused matrix), the gate z, b and a; a causal depthwise conv
// with SiLU over q, k and v; the gated delta rule over L2-normed q and k,
// chunked over the sequence; an RMSNorm gated by SiLU(z); out-projection.
// The rule runs in float32 (float64 for a float64 model, where transformers
// stays in float32).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "target/hf_config.hpp"

namespace dflow::target {

struct LinearAttentionWeights {
  torch::Tensor in_proj_qkv;          // [2 Kd + Vd, H]: q, k, v
  torch::Tensor in_proj_z;            // [Vd, H]
  torch::Tensor in_proj_b, in_proj_a;  // [Hv, H]
  torch::Tensor conv;                 // [2 Kd + Vd, kernel] (conv1d.weight without its unit axis)
  torch::Tensor dt_bias, A_log;       // [Hv]
  torch::Tensor norm;                 // [dv]: the gated RMSNorm's weight (scales by weight, not 1 + weight)
  torch::Tensor out_proj;             // [H, Vd]
  bool defined() const { return in_proj_qkv.defined(); }
};

// What one linear layer carries from one call to the next (incremental
// decoding): the conv's last kernel - 1 inputs and the delta rule's state.
struct LinearAttentionState {
  torch::Tensor conv;       // [B, 2 Kd + Vd, kernel - 1], the model's dtype
  torch::Tensor recurrent;  // [B, Hv, dk, dv], float32 (float64 for a float64 model)
  // Zeros: the state before a sequence's first token.
  static LinearAttentionState zeros(int64_t batch, const LinearAttentionConfig& config, torch::Device device,
                                    torch::Dtype dtype);
  int64_t bytes() const;
};

// Tokens the delta rule computes in one chunk (transformers' chunk_size),
// and the most tokens whose chunk-local [chunk, chunk] matrices are built at
// once: memory grows with min(S, kDeltaRuleWindow) * kDeltaRuleChunk per
// head, never S * S.
constexpr int64_t kDeltaRuleChunk = 64;
constexpr int64_t kDeltaRuleWindow = 4096;

// The gated delta rule. q, k [B, S, Hk, dk], v [B, S, Hv, dv], decay (log
// space, <= 0) and beta [B, S, Hv]; each key head serves Hv / Hk
// consecutive value heads. `state` [B, Hv, dk, dv] is the state before the
// first token (undefined: zeros) and, on return, the state after the last.
// Returns [B, S, Hv, dv] in q's dtype.
torch::Tensor chunked_gated_delta_rule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& decay, const torch::Tensor& beta, torch::Tensor& state,
                                       int64_t chunk = kDeltaRuleChunk, int64_t window = kDeltaRuleWindow);

// The layer's mixer: x [B, S, H] (after the input norm) -> [B, S, H]. With
// `state`, the sequence continues from it and it is advanced past x;
// without, the sequence starts at x's first token.
torch::Tensor gated_deltanet(const torch::Tensor& x, const LinearAttentionWeights& weights,
                             const LinearAttentionConfig& config, double eps, LinearAttentionState* state);

}  // namespace dflow::target
