#include "target/gpt_oss_layers.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <vector>

namespace dflow::target {

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

// The sink as one more key, so that LibTorch's scaled_dot_product_attention
// computes HF's softmax over [scores, sink] exactly: queries get a column of
// ones after their (pre-scaled) features, keys a column of zeros, and the
// sink key, first, zeros with sinks[h] in that column: its score is
// 1 * sinks[h] exactly, and its value is zero, so its share of the softmax
// leaves the output as HF's drop of the sink column does. Head dims are
// padded to a multiple of 8 for the kernels; key/value heads are repeated
// per query head, since each query head has its own sink.
struct SinkKeys {
  torch::Tensor keys, values;  // [B, H, 1 + K, D + pad]: the sink, then keys key_first ..
  int64_t key_first = 0;
};

int64_t sink_padding(int64_t head_dim) { return 8 - head_dim % 8; }  // >= 1: room for the sink's column

SinkKeys sink_keys(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& sinks, int64_t heads,
                   int64_t key_first, int64_t key_count) {
  const int64_t batch = k.size(0), head_dim = k.size(3), groups = heads / k.size(1), pad = sink_padding(head_dim);
  const auto options = k.options();
  SinkKeys out;
  out.key_first = key_first;
  out.keys = torch::zeros({batch, heads, 1 + key_count, head_dim + pad}, options);
  out.values = torch::zeros({batch, heads, 1 + key_count, head_dim + pad}, options);
  out.keys.select(2, 0).select(-1, head_dim).copy_(sinks.to(k.scalar_type()).view({1, heads}).expand({batch, heads}));
  auto body = [&](const torch::Tensor& x) { return x.narrow(2, 1, key_count).narrow(-1, 0, head_dim); };
  body(out.keys).copy_(expand_kv_heads(k.narrow(2, key_first, key_count), groups));
  body(out.values).copy_(expand_kv_heads(v.narrow(2, key_first, key_count), groups));
  return out;
}

// Queries at absolute positions [first, first + count) over keys at
// [key_first, key_first + key_count): j <= p, and p - window < j when
// windowed; the sink's column first, always visible.
torch::Tensor visible_keys(int64_t first, int64_t count, int64_t key_first, int64_t key_count, int64_t window,
                           torch::Device device) {
  const auto options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const torch::Tensor p = (torch::arange(count, options) + first).unsqueeze(1);
  const torch::Tensor j = (torch::arange(key_count, options) + key_first).unsqueeze(0);
  torch::Tensor visible = j <= p;
  if (window > 0) visible = visible & (j > p - window);
  return torch::cat({torch::ones({count, 1}, visible.options()), visible}, -1);
}

// q [B, H, Q, D] at positions first .. over `keys`, the first key_count of them.
torch::Tensor attend(const torch::Tensor& q, const SinkKeys& keys, int64_t first, int64_t key_count, int64_t window) {
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2), head_dim = q.size(3);
  const int64_t pad = sink_padding(head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const torch::Tensor q_aug = torch::cat({q * scale, torch::ones({batch, heads, queries, 1}, q.options()),
                                          torch::zeros({batch, heads, queries, pad - 1}, q.options())},
                                         -1);
  const torch::Tensor mask = visible_keys(first, queries, keys.key_first, key_count, window, q.device());
  return at::scaled_dot_product_attention(q_aug, keys.keys.narrow(2, 0, 1 + key_count),
                                          keys.values.narrow(2, 0, 1 + key_count), mask, /*dropout_p=*/0.0,
                                          /*is_causal=*/false, /*scale=*/1.0)
      .narrow(-1, 0, head_dim);
}

// Queries per attention call: a causal layer's chunks skip the keys after
// their last query (about half the scores of one call over all of them).
constexpr int64_t kQueryChunk = 256;

}  // namespace

torch::Tensor causal_sink_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& sinks, int64_t query_start, int64_t window) {
  const int64_t heads = q.size(1), queries = q.size(2), keys = k.size(2);
  if (keys != query_start + queries) {
    throw std::invalid_argument("causal_sink_attention: " + std::to_string(keys) + " keys for queries at " +
                                std::to_string(query_start) + " .. " + std::to_string(query_start + queries - 1));
  }
  // A full layer: one copy of its keys, each chunk of queries reading them
  // up to its last query. A sliding layer: each chunk copies the keys of
  // its window only, so the cost grows with S * window, not S^2.
  const int64_t chunk = window > 0 ? std::max<int64_t>(window, 128) : kQueryChunk;
  std::optional<SinkKeys> all_keys;
  if (window <= 0) all_keys = sink_keys(k, v, sinks, heads, 0, keys);
  std::vector<torch::Tensor> outputs;
  for (int64_t first = 0; first < queries; first += chunk) {
    const int64_t count = std::min(chunk, queries - first);
    const int64_t position = query_start + first;
    const int64_t key_first = window > 0 ? std::max<int64_t>(0, position - window + 1) : 0;
    const int64_t key_count = position + count - key_first;
    const torch::Tensor q_chunk = q.narrow(2, first, count);
    outputs.push_back(all_keys ? attend(q_chunk, *all_keys, position, key_count, window)
                               : attend(q_chunk, sink_keys(k, v, sinks, heads, key_first, key_count), position,
                                        key_count, window));
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

}  // namespace dflow::target
