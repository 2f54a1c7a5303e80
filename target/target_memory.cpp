// The target's memory model (target/target_memory.hpp). Each count follows
// the code it models: a C++ temporary lives until the end of its full
// expression, a local until its scope ends, so a step's peak is what is
// alive while its last tensor is allocated.
#include "target/target_memory.hpp"

#include <algorithm>
#include <cmath>

#include "formats/safetensors.hpp"
#include "target/gated_deltanet.hpp"

namespace dflow::target {

namespace fs = std::filesystem;

int64_t target_resident_bytes(const HFConfig& c, int64_t element_bytes, bool lm_head_stored, bool mxfp4_dequantized) {
  const int64_t h = c.hidden_size, v = c.vocab_size, hd = c.head_dim;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  const int64_t q_out = c.attention_output_gate ? 2 * q : q;
  int64_t elements = v * h + h, packed_bytes = 0;  // embedding, final norm
  if (!c.tie_word_embeddings || lm_head_stored) elements += v * h;
  const LinearAttentionConfig& l = c.linear;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    elements += 2 * h;  // input and post-attention norms
    if (c.linear_attention(layer)) {
      elements += l.conv_dim() * h + l.value_dim() * h + 2 * l.num_value_heads * h;  // in_proj_qkv, z, b, a
      elements += l.conv_dim() * l.conv_kernel + 2 * l.num_value_heads + l.value_head_dim + h * l.value_dim();
    } else {
      elements += q_out * h + 2 * kv * h + h * q;
      if (c.attention_bias) elements += q_out + 2 * kv;
      if (c.attention_output_bias) elements += h;
      if (c.qk_norm) elements += 2 * hd;
      if (c.attention_sinks) elements += c.num_attention_heads;
    }
    if (!c.moe.sparse(layer)) {
      elements += 3 * c.intermediate_size * h;
      continue;
    }
    const int64_t e = c.moe.num_experts, i = c.moe.expert_intermediate_size;
    elements += e * h;  // router
    if (c.family == ModelFamily::GptOss) {
      elements += e + e * 2 * i + e * h;  // router, gate_up and down biases
      if (c.moe.mxfp4 && !mxfp4_dequantized) {
        // [E, 2I, H/32, 16] and [E, H, I/32, 16] blocks, a scale per 32 values: uint8.
        packed_bytes += e * 2 * i * (h / 32) * 17 + e * h * (i / 32) * 17;
        continue;
      }
    }
    elements += 3 * e * i * h;
    const int64_t shared = c.moe.shared_expert_intermediate_size;
    if (shared > 0) elements += 3 * shared * h + h;  // its gate, up and down, and its sigmoid gate
  }
  return elements * element_bytes + packed_bytes;
}

bool checkpoint_stores_lm_head(const fs::path& dir) {
  const std::string name = "lm_head.weight";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) return formats::read_checkpoint_index(dir, index).count(name) != 0;
  if (fs::exists(dir / "model.safetensors")) return formats::SafetensorsFile(dir / "model.safetensors").contains(name);
  if (!fs::is_directory(dir)) return false;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors" && formats::SafetensorsFile(entry.path()).contains(name))
      return true;
  return false;
}

namespace {

// One forward's dtypes and tokens; the counts below are bytes per token
// unless they say otherwise.
struct Counts {
  double e = 4;      // the target's dtype
  double f = 4;      // the wide dtype: norms' and the delta rule's float32 (float64 for a float64 target)
  double cast = 0;   // 1 when converting to the wide dtype allocates (e != f)
  double tokens = 0;  // rows * length

  // rms_norm / rms_norm_scaled_wide over widths `w` per token, heads of
  // `group` each (the mean and rsqrt per group): the peak, the result included.
  double norm_peak(double w, double group, bool scale_wide) const {
    const double scalars = 3 * f * w / group;  // variance, + eps, rsqrt
    if (scale_wide) return cast * w * f + scalars + 2 * w * f + cast * w * e;  // x_wide, x * rsqrt, weight * it, the cast
    return cast * w * f + scalars + w * f + cast * w * e + w * e;  // x_wide, x * rsqrt, its cast, weight * it
  }
};

bool scales_wide(const HFConfig& c) { return c.norm == NormStyle::ScaleWide || c.norm == NormStyle::OnePlusWeight; }

// RoPE over q or k of width `w` per token (target.cpp's rotate): the peak,
// the result included. Partial rotary rotates rotary_dim of head_dim and
// concatenates the rest back.
double rotate_peak(const HFConfig& c, const Counts& n, double w) {
  const double head = static_cast<double>(c.head_dim);
  const double rotated = w * static_cast<double>(c.rotary_dim > 0 ? c.rotary_dim : c.head_dim) / head;
  const double apply = 4 * rotated * n.e;  // cat(-x2, x1), x * cos, rotated * sin, their sum
  return rotated == w ? apply : std::max(apply, rotated * n.e + w * n.e);
}

// The MLP block after the token mixer (target.cpp's mlp_block), beyond its
// input: the post-attention norm, then the dense SwiGLU or the experts.
double mlp_peak(const HFConfig& c, const Counts& n, int64_t layer, bool cuda) {
  const double h = static_cast<double>(c.hidden_size), e = n.e, f = n.f;
  const double norm = n.norm_peak(h, h, scales_wide(c));
  const double y = h * e;
  // swiglu_mlp: gate, silu, up, their product, then down's output.
  const auto swiglu = [&](double width) { return std::max(4 * width * e + h * e, 2 * h * e); };
  if (!c.moe.sparse(layer)) return std::max(norm, y + swiglu(static_cast<double>(c.intermediate_size)));
  const double experts = static_cast<double>(c.moe.num_experts), k = static_cast<double>(c.moe.experts_per_token);
  const double i = static_cast<double>(c.moe.expert_intermediate_size);
  // route(): the logits, float32 probabilities, top-k values and ids (twice
  // when renormalised), then the weights kept with the sorted pairs.
  const double route = experts * (e + 4) + k * (4 + 8 + 4 + e);
  const double pairs = k * (e + 8) + k * (3 * 8 + e);  // routing's weights and ids; sorted ids, order, tokens, weights
  const bool gpt_oss = c.family == ModelFamily::GptOss;
  double routed;
  if (cuda && e == 2 && c.hidden_size % 8 == 0 && c.moe.expert_intermediate_size % 8 == 0) {
    // experts_by_grouped_mm: every (token, slot) pair's row, gate_up, the
    // activation and its product, and down's output at once.
    // Resident MXFP4 experts: the layer's, dequantized for the products.
    routed = pairs + k * (2 * h * e + 4 * i * e) + (c.moe.mxfp4 ? 3 * experts * i * h * e / n.tokens : 0);
  } else {
    // experts_by_loop: the float32 sum, and one expert's rows at a time
    // (counted at one and a half times an even share of the pairs: the
    // busiest expert gets more than its share).
    const double share = std::min(1.0, 1.5 * k / experts);
    const double clamp = gpt_oss ? 2 * i * e : 0;  // the clamped SwiGLU's clamps
    const double dequantized = c.moe.mxfp4 ? 3 * i * h * e / n.tokens : 0;  // one resident MXFP4 expert, dequantized
    routed = pairs + h * f + share * (2 * h * e + 4 * i * e + clamp + n.cast * h * f) + dequantized + n.cast * h * e;
  }
  double block = std::max(route, routed);
  const double shared = static_cast<double>(c.moe.shared_expert_intermediate_size);
  if (shared > 0) block = std::max(block, h * e + 2 * e + std::max(4 * shared * e + h * e, 3 * h * e));
  return std::max(norm, y + std::max(block, 2 * h * e));
}

// gpt-oss's attention with sinks (gpt_oss_layers.cpp's causal_sink_attention)
// beyond q, k and v: what is alive while the last chunk of queries attends
// (a full layer's keys and values once per query head, with room for the
// sink's column; a sliding layer's per chunk; the queries with that column,
// the mask and the output; the chunks' outputs so far) or while they are
// concatenated; and what stays until the layer ends: the concatenation and
// its copy in [rows, length, heads * head_dim].
struct SinkAttention {
  double peak = 0, kept = 0;  // bytes
};
SinkAttention sink_attention(const HFConfig& c, const Counts& n, int64_t layer, const TargetForwardShape& shape) {
  const double rows = static_cast<double>(shape.rows), length = static_cast<double>(shape.length), e = n.e;
  const double heads = static_cast<double>(c.num_attention_heads), hd = static_cast<double>(c.head_dim);
  const double padded_dim = hd + static_cast<double>(8 - c.head_dim % 8);
  const int64_t window = c.sliding_window(layer);
  const double chunk = std::min(length, static_cast<double>(window > 0 ? std::max<int64_t>(window, 128) : 256));
  const double keys = window > 0 ? std::min(length, chunk + static_cast<double>(window) - 1) : length;
  const double all_keys = window > 0 ? 0 : 2 * rows * heads * (1 + keys) * padded_dim * e;
  const double chunk_keys = window > 0 ? 2 * rows * heads * (1 + keys) * padded_dim * e : 0;
  const double queries = rows * heads * chunk * (hd * e + 2 * padded_dim * e + 4);  // q * scale, q_aug, the output, lse
  const double mask = chunk * (keys + 1) * 4 + 16 * (chunk + keys);
  const double outputs = n.tokens * heads * padded_dim * e;
  const double concatenated = n.tokens * heads * hd * e;
  SinkAttention out;
  out.peak = std::max(all_keys + chunk_keys + outputs + queries + mask, all_keys + outputs + concatenated);
  out.kept = (chunk < length ? concatenated : outputs) + n.tokens * heads * hd * e;  // merged: a copy
  return out;
}

// A full-attention layer beyond its input (target.cpp's decoder_layer).
double attention_peak(const HFConfig& c, const Counts& n, int64_t layer, const TargetForwardShape& shape) {
  const bool cuda = shape.cuda;
  const double t = n.tokens;
  const double h = static_cast<double>(c.hidden_size), e = n.e;
  const double hd = static_cast<double>(c.head_dim), heads = static_cast<double>(c.num_attention_heads);
  const double q = heads * hd, kv = static_cast<double>(c.num_key_value_heads) * hd;
  const bool gated = c.attention_output_gate;
  const double norm = n.norm_peak(h, h, scales_wide(c));
  const double x = h * e;
  // q_proj (with its gate: the [2 q] output, then the gate and the query copied out of it).
  const double projected = gated ? 2 * q * e : q * e;
  double peak = std::max(norm, x + (gated ? 4 * q * e : q * e)) * t;
  double alive = (x + projected) * t;  // q_projected and gate, locals of decoder_layer
  const auto heads_peak = [&](double w, bool from_temporary) {
    const double input = from_temporary ? w * e : 0;  // k's projection, a temporary of its expression
    const double normed = c.qk_norm ? w * e : 0;
    return t * (input + std::max(c.qk_norm ? n.norm_peak(w, hd, scales_wide(c)) : 0.0, normed + rotate_peak(c, n, w)));
  };
  peak = std::max(peak, alive + heads_peak(q, false));
  alive += t * q * e;
  peak = std::max(peak, alive + heads_peak(kv, true));
  alive += t * 2 * kv * e;  // k, v
  if (c.attention_sinks) {
    const SinkAttention sinks = sink_attention(c, n, layer, shape);
    peak = std::max(peak, alive + sinks.peak);
    alive += sinks.kept;
  } else {
    // Attention's output and its log-sum-exp per head (fused kernels: no scores).
    const double attended = t * (q * e + 4 * heads);
    peak = std::max(peak, alive + attended);
    alive += attended;
  }
  if (gated) {
    peak = std::max(peak, alive + 2 * t * q * e);  // sigmoid(gate), merged * it
    alive += t * q * e;
  }
  // o_proj's output and the residual, then the MLP block.
  alive += t * 2 * h * e;
  return std::max(peak, alive + t * mlp_peak(c, n, layer, cuda));
}

// A Gated DeltaNet layer beyond its input (gated_deltanet.cpp), for rows of
// `length` tokens.
double linear_attention_peak(const HFConfig& c, const Counts& n, int64_t layer, const TargetForwardShape& shape) {
  const LinearAttentionConfig& l = c.linear;
  const double h = static_cast<double>(c.hidden_size), e = n.e, f = n.f, t = n.tokens;
  const double channels = static_cast<double>(l.conv_dim()), vd = static_cast<double>(l.value_dim());
  const double hv = static_cast<double>(l.num_value_heads), dk = static_cast<double>(l.key_head_dim);
  const double qk = hv * dk;  // q and k per token once repeated to the value heads
  const double norm = n.norm_peak(h, h, scales_wide(c));
  const double rows = static_cast<double>(shape.rows), length = static_cast<double>(shape.length);
  // Per token: x, the qkv projection, z, b and a, the conv's input and
  // output (with the conv's own output before SiLU while it runs), beta and
  // the decay (float32, with its softplus temporaries).
  const double projections = h * e + channels * e + vd * e + 2 * hv * e;
  const double conv = 2 * channels * e;  // cat(before, mixed), silu(conv)
  const double gates = hv * e + 4 * hv * f;
  double peak = std::max(norm, projections + conv + channels * e) * t;
  const double mixer = (projections + conv + gates) * t +
                        rows * channels * static_cast<double>(l.conv_kernel - 1) * e;  // zeros before each row

  // The delta rule (chunked_gated_delta_rule): q and k repeated to the value
  // heads (when fewer key heads), then q, k, v, beta and the decay in float32,
  // heads first (l2norm's square and result beside the input).
  const double chunk = static_cast<double>(std::min<int64_t>(kDeltaRuleChunk, std::max<int64_t>(1, shape.length)));
  const double padded_length = std::ceil(length / chunk) * chunk;
  const double padded = rows * padded_length;
  const double repeated = l.num_value_heads != l.num_key_heads ? qk * e : 0;
  const double state = rows * hv * dk * static_cast<double>(l.value_head_dim) * f;
  peak = std::max(peak, mixer + t * (2 * repeated + 3 * qk * f));      // q's l2norm
  peak = std::max(peak, mixer + t * (repeated + qk * f + 3 * qk * f));  // k's
  double rule = t * (2 * qk + vd + 2 * hv) * f + state;
  if (padded_length > length) rule += padded * (2 * qk + vd + 2 * hv) * f;  // the zero-padded copies
  // One window of chunks: the chunk-local [chunk, chunk] matrices per value
  // head (pairwise decays, the UT system, the intra-chunk scores, three while
  // the pairwise decays are built), k and v times beta, the triangular
  // solves' results, the decayed q and k, and the cumulative decays; copies
  // of q, k, v and beta when the window is a part of the row.
  const double window_chunks = std::min(std::floor(static_cast<double>(kDeltaRuleWindow) / chunk), padded_length / chunk);
  const double window = rows * window_chunks * chunk;
  const double windowed = window < padded ? (2 * qk + vd + hv) : 0;
  const double matrices = hv * chunk * f;
  const double window_bytes =
      window * ((windowed + 2 * vd + 5 * qk + 2 * hv) * f + 3 * matrices) + rows * hv * chunk * (2 * vd / hv) * f;
  // The outputs of every chunk, then their concatenation and its copy back
  // to [rows, length, Hv, dv] in the target's dtype.
  const double outputs = padded * vd * f;
  const double chunk_step = rows * chunk * 3 * vd * f + 2 * state;  // one chunk's products and the next state
  const double concatenated = 2 * padded * vd * f + t * vd * e * (1 + n.cast);
  peak = std::max(peak, mixer + rule + std::max(window_bytes + outputs + chunk_step, concatenated));
  // The gated RMSNorm over the rule's output, and out_proj.
  const double core = vd * e;
  const double gated_norm = std::max({(2 + n.cast) * vd * f, vd * f + (1 + n.cast) * vd * e,
                                      vd * e + (2 + n.cast) * vd * f + n.cast * vd * e});
  peak = std::max(peak, mixer + t * (core + gated_norm));
  peak = std::max(peak, mixer + t * (core + vd * e + h * e));
  // The mixer's output and the residual beside x, then the MLP block.
  return std::max(peak, t * (3 * h * e + mlp_peak(c, n, layer, shape.cuda)));
}

}  // namespace

TargetForwardMemory estimate_target_forward(const HFConfig& c, const TargetForwardShape& shape) {
  Counts n;
  n.e = static_cast<double>(shape.element_bytes);
  n.f = shape.element_bytes == 8 ? 8 : 4;
  n.cast = n.e == n.f ? 0 : 1;
  n.tokens = static_cast<double>(shape.rows * shape.length);
  const double hidden = n.tokens * static_cast<double>(c.hidden_size) * n.e;
  const double features = static_cast<double>(shape.features) * hidden;
  // RoPE's tables and the positions, for the whole forward.
  const double rotary_dim = static_cast<double>(c.rotary_dim > 0 ? c.rotary_dim : c.head_dim);
  const double tables = static_cast<double>(shape.length) * (2 * rotary_dim * n.e + 8 + 2 * rotary_dim * n.f);
  double layer = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const double own = c.linear_attention(l) ? linear_attention_peak(c, n, l, shape)
                                             : attention_peak(c, n, l, shape);
    layer = std::max(layer, own);
  }
  // The final norm of the last layer's output.
  layer = std::max(layer, n.tokens * n.norm_peak(static_cast<double>(c.hidden_size), static_cast<double>(c.hidden_size),
                                                 scales_wide(c)));
  TargetForwardMemory out;
  out.features_bytes = 2 * features + tables;  // the hidden states and their concatenation
  out.layer_bytes = features + hidden + layer + tables;
  return out;
}

int64_t target_cache_bytes(const HFConfig& c, int64_t element_bytes, int64_t capacity) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t wide = element_bytes == 8 ? 8 : 4;
  int64_t bytes = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (c.linear_attention(layer)) {
      bytes += 2 * (l.conv_dim() * (l.conv_kernel - 1) * element_bytes +
                    l.num_value_heads * l.key_head_dim * l.value_head_dim * wide);
    } else {
      bytes += 2 * c.num_key_value_heads * capacity * c.head_dim * element_bytes;
    }
  }
  return bytes;
}

}  // namespace dflow::target
