#include "drafter/drafter_memory.hpp"

#include <algorithm>

#include "drafter/kind.hpp"

namespace dflow::drafter {

namespace {

double bytes_of(torch::Dtype dtype) { return static_cast<double>(c10::elementSize(dtype)); }

double parameter_count(const DrafterSpec& s) {
  const double h = static_cast<double>(s.hidden_size), qd = static_cast<double>(s.num_attention_heads * s.head_dim);
  const double kd = static_cast<double>(s.num_key_value_heads * s.head_dim), i = static_cast<double>(s.intermediate_size);
  const double bias = s.attention_bias ? 2 * qd + 2 * kd + h : 0;
  const double layer = 2 * h * qd + 2 * h * kd + 3 * h * i + 2 * static_cast<double>(s.head_dim) + 2 * h + bias;
  return static_cast<double>(s.num_layers) * layer + static_cast<double>(s.num_features()) * h * h + 2 * h;
}

// The mean keys a chunk's context part reads, over a row's chunks: chunk k
// of n (equal shares of sorted anchors spread over the row) reads up to
// about k/n of the context; a sliding layer from its earliest anchor minus
// the window on (drafter/sliding_window.cpp).
double mean_chunk_context(double context, int64_t chunks, int64_t window) {
  double sum = 0;
  for (int64_t k = 1; k <= chunks; ++k) {
    const double reach = context * static_cast<double>(k) / static_cast<double>(chunks);
    sum += window > 0 ? std::min(reach, static_cast<double>(window) + context / static_cast<double>(chunks)) : reach;
  }
  return sum / static_cast<double>(chunks);
}

}  // namespace

DrafterMemoryEstimate estimate_drafter_memory(const DrafterSpec& spec, const DrafterMemoryShape& shape) {
  const double e = bytes_of(shape.dtype), f = 4;  // activations; the norms' float32 upcasts
  const double h = static_cast<double>(spec.hidden_size), i = static_cast<double>(spec.intermediate_size);
  const double qd = static_cast<double>(spec.num_attention_heads * spec.head_dim);
  const double kd = static_cast<double>(spec.num_key_value_heads * spec.head_dim);
  const double heads = static_cast<double>(spec.num_attention_heads);
  const double rows = static_cast<double>(shape.rows), length = static_cast<double>(shape.context_length);
  const double layers = static_cast<double>(spec.num_layers), block = static_cast<double>(spec.block_size);
  const int64_t anchors = std::max<int64_t>(1, shape.anchors_per_sequence);

  DrafterMemoryEstimate out;
  out.anchors = shape.rows * shape.anchors_per_sequence;
  // Weights and gradients in the compute dtype, fp32 moments, fp32 masters of bf16 weights.
  const double masters = shape.dtype == torch::kFloat32 ? 0 : 4;
  // The drafter kind's modules count as the backbone's.
  const DrafterKind& kind = drafter_kind(spec.kind);
  const double parameters = drafter_parameter_count(spec);
  out.parameter_bytes = parameters * (2 * e + 4 * static_cast<double>(shape.optimizer_floats_per_parameter) + masters);
  out.frozen_bytes = (2 * static_cast<double>(spec.vocab_size) * h + static_cast<double>(kind.frozen_count(spec))) * e;

  // Context side, per token: the features as fc reads them, hidden_norm's
  // upcast and output, the context; per layer its K/V and, when kept for
  // backward, k_norm's and RoPE's saved inputs.
  const double features = static_cast<double>(spec.num_features()) * h * e;
  const double per_layer_kv = shape.recompute_layers ? 0 : kd * (f + 3 * e) + 2 * kd * e;
  // A loss that reads the target's distribution: its last hidden state per token.
  const double teacher = shape.teacher ? e * h : 0;
  out.context_bytes = rows * length * (features + f * h + 2 * e * h + layers * per_layer_kv + teacher);

  // Chunks as block_attention cuts them (blocks_per_chunk_for_budget).
  const int64_t blocks_per_chunk = std::min<int64_t>(
      anchors, blocks_per_chunk_for_budget(shape.rows, spec.num_attention_heads, shape.context_length,
                                           spec.block_size, shape.max_attention_scores_per_chunk));
  const int64_t chunks = (anchors + blocks_per_chunk - 1) / blocks_per_chunk;
  const double queries = static_cast<double>(blocks_per_chunk) * block;

  // One draft slot of one layer, what autograd keeps: the norms' upcasts
  // (input and post-attention: H each; q_norm: Qd; k_norm: Kd) in fp32; in
  // the compute dtype the normed inputs of the projections (4 H), q's norm,
  // RoPE and attention inputs and the attention output before and after its
  // reshape (6 Qd), k's norm and RoPE (3 Kd), the SwiGLU's four (4 I); the
  // log-sum-exp per head. Per chunk: the attention mask as a float bias and
  // the concatenated context + own-block keys and values.
  auto slot_layer_bytes = [&](int64_t window) {
    const double keys = mean_chunk_context(length, chunks, window) + queries;
    return f * (2 * h + qd + kd) + e * (4 * h + 6 * qd + 3 * kd + 4 * i) + 4 * heads + e * keys +
           2 * kd * e * keys / queries;
  };
  double all_layers = 0, largest_layer = 0;
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    const double bytes = slot_layer_bytes(spec.layer_window(layer));
    all_layers += bytes;
    largest_layer = std::max(largest_layer, bytes);
  }
  // Outside the layers, per slot: the block embedding, RoPE tables, the
  // final norm, the loss's kept gradient, the plan's boolean masks, and the
  // teacher's hidden state gathered for the slot.
  const double mask_bytes = (mean_chunk_context(length, chunks, 0) + queries) * (spec.any_sliding() ? 2 : 1);
  const double outside = e * h + 2 * e * static_cast<double>(spec.head_dim) + f * h + 2 * e * h + mask_bytes + teacher;
  // Recomputing: each layer's input stays, plus one layer at a time in
  // backward. Either way a layer's backward holds gradients of its largest
  // activations (the SwiGLU's and the hidden state's) while it runs.
  const double kept = shape.recompute_layers ? layers * e * h + largest_layer : all_layers;
  const double backward_set = e * (2 * i + 2 * h);
  // The kind's modules, and what its loss terms keep until backward: each
  // extra loss call a [P, H] gradient (and [P, r] with a bias), its inputs' activations.
  const KindLossMemory kind_loss = kind.loss_memory(spec, shape.kind_options);
  const double kind_slot =
      f * static_cast<double>(kind.activation_floats_per_slot(spec) + kind_loss.floats_per_slot) +
      e * static_cast<double>(kind_loss.extra_loss_calls) * h +
      e * static_cast<double>(kind_loss.biased_loss_calls * kind_loss.bias_rank);
  out.per_anchor_bytes = block * (kept + outside + backward_set + kind_slot);

  // Transient: one chunk of logits (the head's product in the compute dtype
  // before its float32 copy, then the loss's buffers) and the gradients of a
  // layer's context K/V.
  const double logit_rows = rows * static_cast<double>(anchors) * block;
  const double before_copy = shape.dtype == torch::kFloat32 ? 0 : e;
  const double logits = std::min(static_cast<double>(shape.max_logits_per_chunk),
                                 logit_rows * static_cast<double>(spec.vocab_size)) *
                        (before_copy + f * shape.loss_chunk_buffers);
  // A kind's own chunks of logits (its terms run after the main loss's,
  // one chunk at a time, in chunks of at most kKindLogitsPerChunk) and the
  // [V, r] gradients its biased loss calls keep until backward (float32
  // while they sum, then in the compute dtype).
  const double kind_logits = std::min(static_cast<double>(kKindLogitsPerChunk),
                                      logit_rows * static_cast<double>(spec.vocab_size)) *
                             f * kind_loss.logit_chunk_buffers;
  const double bias_gradients = static_cast<double>(kind_loss.biased_loss_calls) *
                                static_cast<double>(spec.vocab_size * kind_loss.bias_rank) * (f + e);
  out.transient_bytes = std::max(logits, kind_logits) + bias_gradients + rows * length * 2 * kd * e;
  return out;
}

double drafter_parameter_count(const DrafterSpec& spec) {
  return parameter_count(spec) + static_cast<double>(drafter_kind(spec.kind).parameter_count(spec));
}

int64_t largest_anchors_that_fit(const DrafterSpec& spec, DrafterMemoryShape shape, double available_bytes,
                                 int64_t up_to) {
  auto fits = [&](int64_t anchors) {
    shape.anchors_per_sequence = anchors;
    return estimate_drafter_memory(spec, shape).total_bytes() <= available_bytes;
  };
  if (up_to < 1 || !fits(1)) return 0;
  int64_t low = 1, high = up_to;  // fits(low) holds
  while (low < high) {
    const int64_t mid = low + (high - low + 1) / 2;
    if (fits(mid)) low = mid; else high = mid - 1;
  }
  return low;
}

}  // namespace dflow::drafter
