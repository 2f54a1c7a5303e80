#include "model/gpt_oss_layers.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dflow::model {

namespace {

torch::Dtype wide_dtype_for(torch::Dtype dtype) { return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }

// transformers' find_correction_dim, in double as Python computes it.
double correction_dim(double rotations, int64_t dim, double base, int64_t original_max_positions) {
  return (static_cast<double>(dim) *
          std::log(static_cast<double>(original_max_positions) / (rotations * 2 * M_PI))) /
         (2 * std::log(base));
}

}  // namespace

double yarn_attention_factor(const RopeScaling& scaling) {
  return scaling.factor <= 1.0 ? 1.0 : 0.1 * std::log(scaling.factor) + 1.0;
}

torch::Tensor yarn_inverse_frequencies(int64_t head_dim, double rope_theta, const RopeScaling& scaling) {
  const int64_t dim = head_dim;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  // Op for op as _compute_yarn_parameters, float32 tensors and double scalars.
  const torch::Tensor pos_freqs =
      torch::pow(c10::Scalar(rope_theta), torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / dim);
  const torch::Tensor extrapolation = 1.0 / pos_freqs;
  const torch::Tensor interpolation = 1.0 / (scaling.factor * pos_freqs);
  double low = correction_dim(scaling.beta_fast, dim, rope_theta, scaling.original_max_position_embeddings);
  double high = correction_dim(scaling.beta_slow, dim, rope_theta, scaling.original_max_position_embeddings);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const torch::Tensor ramp = ((torch::arange(dim / 2, f32) - low) / (high - low)).clamp(0, 1);
  const torch::Tensor extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

RotaryTables scaled_rotary_tables(const torch::Tensor& positions, int64_t head_dim, double rope_theta,
                                  const RopeScaling& scaling, torch::Dtype dtype) {
  if (scaling.type == "default") return rotary_tables(positions, head_dim, rope_theta, dtype);
  if (scaling.type != "yarn") throw std::invalid_argument("rotary tables: rope scaling '" + scaling.type + "' is not implemented");
  TORCH_CHECK(positions.dim() == 1 || positions.dim() == 2, "scaled_rotary_tables: positions must be [S] or [B, S], got ",
              positions.sizes());
  const auto angle_dtype = wide_dtype_for(dtype);
  const torch::Tensor inv_freq =
      yarn_inverse_frequencies(head_dim, rope_theta, scaling).to(positions.device(), angle_dtype);
  const torch::Tensor batched = positions.dim() == 1 ? positions.unsqueeze(0) : positions;  // [B or 1, S]
  const torch::Tensor freqs = batched.to(angle_dtype).unsqueeze(-1) * inv_freq;             // [B, S, D/2]
  const double attention_factor = yarn_attention_factor(scaling);
  // cos and sin of the half, scaled, then laid out for apply_rotary's rotate-half.
  const torch::Tensor cos = freqs.cos() * attention_factor, sin = freqs.sin() * attention_factor;
  return {torch::cat({cos, cos}, -1).unsqueeze(1).to(dtype), torch::cat({sin, sin}, -1).unsqueeze(1).to(dtype)};
}

torch::Tensor rms_norm_scaled_wide(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto input_dtype = x.scalar_type();
  const torch::Tensor x_wide = x.to(wide_dtype_for(input_dtype));
  const torch::Tensor variance = x_wide.pow(2).mean(-1, /*keepdim=*/true);
  return (weight.to(x_wide.scalar_type()) * (x_wide * torch::rsqrt(variance + eps))).to(input_dtype);
}

namespace {

// Attention of every query over its visible keys and its head's sink, with
// LibTorch's scaled_dot_product_attention: the sink is one more key, whose
// score is the sink logit itself. Queries get a column of ones after their
// (pre-scaled) features, keys a column of zeros, and the sink key zeros with
// sinks[h] in that column: its score is 1 * sinks[h], exactly, and its value
// is zero, so its share of the softmax leaves the output as HF's drop of the
// sink column does. Head dims are padded to a multiple of 8 for the kernels.
// visible [Q, K] bool, shared by the batch and the heads.
torch::Tensor attention_with_sink_key(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& sinks, const torch::Tensor& visible) {
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), head_dim = q.size(3);
  const int64_t keys = k.size(2), groups = heads / k.size(1);
  const int64_t pad = 8 - head_dim % 8;  // >= 1: room for the sink's column
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const auto options = q.options();
  const torch::Tensor ones = torch::ones({batch, heads, queries, 1}, options);
  const torch::Tensor q_aug = torch::cat({q * scale, ones, torch::zeros({batch, heads, queries, pad - 1}, options)}, -1);
  const torch::Tensor sink_key = torch::zeros({batch, heads, 1, head_dim + pad}, options);
  sink_key.select(-1, head_dim).copy_(sinks.to(q.scalar_type()).view({1, heads, 1}).expand({batch, heads, 1}));
  const torch::Tensor padding = torch::zeros({batch, heads, keys, pad}, options);
  const torch::Tensor k_aug =
      torch::cat({torch::cat({expand_kv_heads(k, groups), padding}, -1), sink_key}, 2);  // [B, H, K + 1, D + pad]
  const torch::Tensor v_aug =
      torch::cat({torch::cat({expand_kv_heads(v, groups), padding}, -1), torch::zeros_like(sink_key)}, 2);
  const torch::Tensor mask =
      torch::cat({visible, torch::ones({queries, 1}, visible.options())}, -1);  // the sink is always visible
  return at::scaled_dot_product_attention(q_aug, k_aug, v_aug, mask, /*dropout_p=*/0.0, /*is_causal=*/false,
                                          /*scale=*/1.0)
      .narrow(-1, 0, head_dim);
}

// Queries at absolute positions [first, first + count) over keys at
// [key_first, key_first + key_count): j <= p, and p - window < j when windowed.
torch::Tensor visible_keys(int64_t first, int64_t count, int64_t key_first, int64_t key_count, int64_t window,
                           torch::Device device) {
  const auto options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const torch::Tensor p = (torch::arange(count, options) + first).unsqueeze(1);
  const torch::Tensor j = (torch::arange(key_count, options) + key_first).unsqueeze(0);
  torch::Tensor visible = j <= p;
  if (window > 0) visible = visible & (j > p - window);
  return visible;
}

}  // namespace

torch::Tensor causal_sink_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& sinks, int64_t query_start, int64_t window) {
  const int64_t queries = q.size(2), keys = k.size(2);
  if (keys != query_start + queries) {
    throw std::invalid_argument("causal_sink_attention: " + std::to_string(keys) + " keys for queries at " +
                                std::to_string(query_start) + " .. " + std::to_string(query_start + queries - 1));
  }
  if (window <= 0) {
    return attention_with_sink_key(q, k, v, sinks, visible_keys(query_start, queries, 0, keys, 0, q.device()));
  }
  // A sliding layer: chunks of queries, each over the keys of its window
  // only, so the cost grows with S * window, not S^2.
  const int64_t chunk = std::max<int64_t>(window, 128);
  std::vector<torch::Tensor> outputs;
  for (int64_t first = 0; first < queries; first += chunk) {
    const int64_t count = std::min(chunk, queries - first);
    const int64_t position = query_start + first;
    const int64_t key_first = std::max<int64_t>(0, position - window + 1);
    const int64_t key_count = position + count - key_first;
    outputs.push_back(attention_with_sink_key(q.narrow(2, first, count), k.narrow(2, key_first, key_count),
                                              v.narrow(2, key_first, key_count), sinks,
                                              visible_keys(position, count, key_first, key_count, window, q.device())));
  }
  return outputs.size() == 1 ? outputs.front() : torch::cat(outputs, 2);
}

torch::Tensor document_sink_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& sinks, const DocumentAttention& documents, int64_t window) {
  const int64_t batch = q.size(0), length = q.size(2);
  std::vector<torch::Tensor> rows(static_cast<size_t>(batch));
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < documents.spans.size(); ++i) {
    const DocumentSpan& span = documents.spans[i];
    auto part = [&](const torch::Tensor& x) { return x.narrow(0, span.row, 1).narrow(2, span.start, span.length); };
    parts.push_back(causal_sink_attention(part(q), part(k), part(v), sinks, 0, window));
    if (i + 1 == documents.spans.size() || documents.spans[i + 1].row != span.row) {
      rows.at(static_cast<size_t>(span.row)) = parts.size() == 1 ? parts.front() : torch::cat(parts, 2);
      parts.clear();
    }
  }
  for (const torch::Tensor& row : rows) {
    if (!row.defined() || row.size(2) != length) {
      throw std::invalid_argument("document_sink_attention: the documents do not tile the " + std::to_string(length) +
                                  "-token rows of the batch");
    }
  }
  return batch == 1 ? rows.front() : torch::cat(rows, 0);
}

}  // namespace dflow::model
