#include "model/layers.hpp"

#include <cmath>

namespace dflow::model {

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

torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::optional<torch::Tensor>& visible_mask, bool causal) {
  const int64_t groups = q.size(1) / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return at::scaled_dot_product_attention(q, expand_kv_heads(k, groups), expand_kv_heads(v, groups), visible_mask,
                                          /*dropout_p=*/0.0, causal, scale);
}

torch::Tensor swiglu_mlp(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& up_weight,
                         const torch::Tensor& down_weight) {
  return at::linear(torch::silu(at::linear(x, gate_weight)) * at::linear(x, up_weight), down_weight);
}

}  // namespace dflow::model
