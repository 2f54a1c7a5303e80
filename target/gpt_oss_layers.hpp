// The parts of gpt-oss's decoder the dense families do not have, written to
// match transformers' GptOss modules: YaRN rotary tables, attention with a
// learned sink logit per head and an optional sliding window, and its RMSNorm
// (the weight applied before the cast back). Internal to model/.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "target/documents.hpp"
#include "target/hf_config.hpp"
#include "target/layers.hpp"

namespace dflow::target {

// The rotary tables `scaling` describes: "default" is rotary_tables itself
// (unchanged, bit for bit); "yarn" blends the interpolated and extrapolated
// frequencies as transformers' _compute_yarn_parameters does (in float32)
// and scales cos and sin by its attention factor 0.1 ln(factor) + 1.
RotaryTables scaled_rotary_tables(const torch::Tensor& positions, int64_t head_dim, double rope_theta,
                                  const RopeScaling& scaling, torch::Dtype dtype);

// YaRN's inverse frequencies [head_dim / 2], float32, and its attention factor.
torch::Tensor yarn_inverse_frequencies(int64_t head_dim, double rope_theta, const RopeScaling& scaling);
double yarn_attention_factor(const RopeScaling& scaling);

// GptOssRMSNorm: normalise in float32 (float64 stays float64), scale by the
// weight there, then cast back to x's dtype.
torch::Tensor rms_norm_scaled_wide(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Causal attention with sinks: softmax over [q.k * scale for the visible
// keys, sinks[h]], the sink's share dropped (GptOss eager_attention_forward).
// q [B, H, Q, D] at positions query_start .. query_start + Q - 1; k/v
// [B, KVH, K, D] at positions 0 .. K - 1 (K = query_start + Q: a KV cache's
// keys, or the queries' own). window > 0: a query at p sees keys j with
// p - window < j <= p (transformers' sliding_window_overlay); 0: all j <= p.
// A sliding layer's queries run in chunks, each over its window's keys only.
torch::Tensor causal_sink_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& sinks, int64_t query_start, int64_t window);

// The same over packed rows: each document attends to itself alone, its
// first token at position 0 of the window (documents.spans; the
// variable-length kernel has no sinks).
torch::Tensor document_sink_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& sinks, const DocumentAttention& documents, int64_t window);

}  // namespace dflow::target
