// What the frozen target holds in memory, from its config alone: the bytes of
// the tensors TargetModel::load keeps (the text model only: a multimodal
// wrapper's vision tower and a checkpoint's mtp.* layers are never loaded),
// the peak working memory of one forward over a micro-batch (target_forward's
// context_features), and the per-sequence cache of generation (dflow eval,
// dflow regenerate). Counted tensor by tensor from the ops of target/target.cpp,
// target/gated_deltanet.cpp, target/moe.cpp and target/layers.cpp, in the
// order they allocate and free; tests/drafter/test_target_memory.cpp checks it
// against the peak a counting allocator measures on the CPU.
#pragma once

#include <cstdint>
#include <filesystem>

#include "target/hf_config.hpp"

namespace dflow::target {

// The bytes of the text model's tensors as TargetModel::load keeps them in a
// dtype of `element_bytes` (2: bfloat16/float16, 4: float32, 8: float64):
// embedding, per layer its norms and its token mixer (full attention with
// Qwen3.5's output gate and q/k norms, or Gated DeltaNet's in-projections,
// conv, A_log, dt_bias, gated norm and out-projection), its MLP (dense, or
// router, routed experts and Qwen3.5-MoE's shared expert), the final norm,
// and the LM head unless it is the embedding. `lm_head_stored`: the
// checkpoint holds lm_head.weight (a tied target that stores it loads it as
// its own tensor). gpt-oss's MXFP4 experts count packed (uint8 blocks and
// scales) unless `mxfp4_dequantized`.
int64_t target_resident_bytes(const HFConfig& config, int64_t element_bytes, bool lm_head_stored,
                              bool mxfp4_dequantized = false);

// Whether the checkpoint in `dir` stores lm_head.weight (read from its
// safetensors headers or index; false when it holds no safetensors, e.g. a
// config alone): what target_resident_bytes's lm_head_stored asks.
bool checkpoint_stores_lm_head(const std::filesystem::path& dir);

// One forward over a right-padded micro-batch.
struct TargetForwardShape {
  int64_t rows = 1;           // sequences
  int64_t length = 0;         // tokens per row
  int64_t element_bytes = 4;  // the target's dtype
  int64_t features = 1;       // hidden states returned and concatenated (feature layers, the teacher's last)
  bool cuda = false;          // CUDA: bfloat16 routed experts run all at once (grouped products)
};
// gpt-oss's MXFP4 experts count as kept resident (the default), each layer's
// or expert's dequantized while it computes.

struct TargetForwardMemory {
  double features_bytes = 0;  // the returned hidden states and their concatenation [rows, length, n * H]
  double layer_bytes = 0;     // the largest layer's working set beside the features kept so far
  double total_bytes() const { return features_bytes > layer_bytes ? features_bytes : layer_bytes; }
};

// The peak of TargetModel::context_features over such a batch, beyond the
// resident weights: during the largest layer, the features kept so far, the
// layer's input and what the layer allocates (attention's projections,
// RoPE and output, the MLP's or the experts' intermediates, Gated DeltaNet's
// projections, conv, float32 q, k, v, and the delta rule's chunk matrices
// of one window of kDeltaRuleWindow tokens with its [rows, Hv, dk, dv]
// state); at the end, the features and their concatenation.
TargetForwardMemory estimate_target_forward(const HFConfig& config, const TargetForwardShape& shape);

// Bytes of one sequence's generation cache of `capacity` tokens
// (TargetModel::new_cache): the full-attention layers' keys and values, and
// each linear layer's conv and recurrent state twice (the state and the one
// kept for rolling back a rejected draft).
int64_t target_cache_bytes(const HFConfig& config, int64_t element_bytes, int64_t capacity);

}  // namespace dflow::target
