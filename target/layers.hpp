// The math shared by the target and the drafter: RMSNorm, NeoX RoPE,
// grouped-query attention and the SwiGLU MLP, written to match Hugging Face's
// Qwen3/Llama modules (same op order, same float32 upcasts).
#pragma once

#include <torch/torch.h>

#include <optional>

namespace dflow::target {

// RMSNorm over the last axis. Like HF: normalise in float32 (float64 stays
// float64), cast back to the input dtype, then scale by `weight`.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// cos/sin tables of the NeoX ("rotate half") RoPE for the given absolute
// positions. positions [S] gives tables [1, 1, S, D]; positions [B, S] gives
// [B, 1, S, D], broadcasting over heads. Angles are computed in float32 (as
// HF does; float64 when `dtype` is float64) and then cast to `dtype`.
struct RotaryTables {
  torch::Tensor cos;  // [1 or B, 1, S, D]
  torch::Tensor sin;  // [1 or B, 1, S, D]
};
RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double rope_theta, torch::Dtype dtype);

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2]).
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);  // x [B, heads, S, D]

// [B, kv_heads, S, D] -> [B, kv_heads * groups, S, D]; query head i reads
// kv head i / groups (HF repeat_kv).
torch::Tensor expand_kv_heads(const torch::Tensor& kv, int64_t groups);

// How grouped_attention meets query heads that share a key/value head.
enum class KvHeads {
  // Never repeated: LibTorch's attention reads them grouped (enable_gqa) on
  // the CPU and without a mask; on CUDA with a mask, where the masked
  // kernels take equal head counts only, each group's queries are folded
  // onto the query axis of their one key/value head (the mask is repeated
  // per group instead, a fraction of K/V's size at the chunk shapes used).
  grouped,
  // Always folded as above (what `grouped` does on CUDA with a mask; here so
  // that it is tested on any device). Not with causal.
  folded,
  // Repeated to one per query head first (HF repeat_kv): the reference, and
  // the "before" of the benchmark.
  expanded,
};

// Scaled dot-product attention, scale 1/sqrt(D).
// q [B, H, Q, D], k/v [B, KVH, K, D]; visible_mask (bool, true = may attend)
// broadcastable to [B, H, Q, K]; every query row must see at least one key.
torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::optional<torch::Tensor>& visible_mask, bool causal,
                                KvHeads kv_heads = KvHeads::grouped);

// down(silu(gate(x)) * up(x)), bias-free.
torch::Tensor swiglu_mlp(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& up_weight,
                         const torch::Tensor& down_weight);

}  // namespace dflow::target
