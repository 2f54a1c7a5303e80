#include "target/layers.hpp"

#include <cmath>

namespace dflow::target {

namespace {
torch::Dtype compute_dtype_for(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}
}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  const torch::Tensor x_wide = x.to(compute_dtype_for(input_dtype));
  const torch::Tensor variance = x_wide.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x_wide * torch::rsqrt(variance + eps)).to(input_dtype);
}

RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double rope_theta, torch::Dtype dtype) {
  TORCH_CHECK(positions.dim() == 1 || positions.dim() == 2, "rotary_tables: positions must be [S] or [B, S], got ",
              positions.sizes());
  const auto angle_dtype = compute_dtype_for(dtype);
  const auto options = torch::TensorOptions().dtype(angle_dtype).device(positions.device());
  // inv_freq[i] = theta^(-2i/D), i < D/2
  const torch::Tensor exponents = torch::arange(0, head_dim, 2, options.dtype(torch::kInt64)).to(angle_dtype) /
                                  static_cast<double>(head_dim);
  const torch::Tensor inv_freq = 1.0 / torch::pow(torch::scalar_tensor(rope_theta, options), exponents);
  const torch::Tensor batched = positions.dim() == 1 ? positions.unsqueeze(0) : positions;  // [B or 1, S]
  const torch::Tensor freqs = batched.to(angle_dtype).unsqueeze(-1) * inv_freq;             // [B, S, D/2]
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);                 // [B, 1, S, D]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * tables.cos + rotated * tables.sin;
}

torch::Tensor expand_kv_heads(const torch::Tensor& kv, int64_t groups) {
  if (groups == 1) return kv;
  const auto batch = kv.size(0), kv_heads = kv.size(1), length = kv.size(2), head_dim = kv.size(3);
  return kv.unsqueeze(2).expand({batch, kv_heads, groups, length, head_dim}).reshape({batch, kv_heads * groups, length, head_dim});
}

namespace {

// Query heads h = kv * groups + g onto the query axis of key/value head kv:
// q [B, KVH * G, Q, D] -> [B, KVH, G * Q, D], the mask likewise (repeated
// per group where it broadcasts over heads), and the output back.
torch::Tensor folded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& visible_mask, int64_t groups, double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), keys = k.size(2);
  const torch::Tensor folded_q = q.reshape({batch, kv_heads, groups * queries, head_dim});
  torch::Tensor mask = visible_mask;
  while (mask.dim() < 4) mask = mask.unsqueeze(0);
  const int64_t mask_batch = mask.size(0);
  const torch::Tensor folded_mask =
      mask.size(1) == 1
          ? mask.expand({mask_batch, 1, queries, keys}).unsqueeze(2).expand({mask_batch, 1, groups, queries, keys})
                .reshape({mask_batch, 1, groups * queries, keys})
          : mask.expand({mask_batch, heads, queries, keys}).reshape({mask_batch, kv_heads, groups * queries, keys});
  return at::scaled_dot_product_attention(folded_q, k, v, folded_mask, /*dropout_p=*/0.0, /*is_causal=*/false, scale)
      .reshape({batch, heads, queries, head_dim});
}

}  // namespace

torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::optional<torch::Tensor>& visible_mask, bool causal, KvHeads kv_heads) {
  const int64_t groups = q.size(1) / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (groups == 1 || kv_heads == KvHeads::expanded) {
    return at::scaled_dot_product_attention(q, expand_kv_heads(k, groups), expand_kv_heads(v, groups), visible_mask,
                                            /*dropout_p=*/0.0, causal, scale);
  }
  const bool fold = kv_heads == KvHeads::folded || (visible_mask.has_value() && !q.device().is_cpu() && !causal);
  if (fold) {
    TORCH_CHECK(!causal, "grouped_attention: folded query heads cannot run causally");
    return folded_attention(q, k, v, visible_mask.value_or(torch::ones({1, 1, 1, 1}, q.options().dtype(torch::kBool))),
                            groups, scale);
  }
  return at::scaled_dot_product_attention(q, k, v, visible_mask, /*dropout_p=*/0.0, causal, scale,
                                          /*enable_gqa=*/true);
}

torch::Tensor swiglu_mlp(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& up_weight,
                         const torch::Tensor& down_weight) {
  return at::linear(torch::silu(at::linear(x, gate_weight)) * at::linear(x, up_weight), down_weight);
}

}  // namespace dflow::target
