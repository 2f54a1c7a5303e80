// What one drafter step holds in memory, from the shapes alone: the
// parameters and their optimizer state, the frozen embedding and LM head,
// the context side (features, per-layer context K/V) and, per anchor, the
// activations that autograd keeps from the forward pass to the backward pass
// (with recompute_layers, only each layer's input plus one layer's
// activations while it runs backward). Counted tensor by tensor from the ops
// of drafter/drafter.cpp, drafter/block_attention.cpp and layers.cpp (which
// tensors each op saves for backward); bench_drafter_compute checks it
// against the peak that a counting allocator measures on the CPU.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

struct DrafterMemoryShape {
  int64_t rows = 1;                  // samples per micro-batch
  int64_t context_length = 0;        // tokens per row (max_length)
  int64_t anchors_per_sequence = 0;  // blocks per row
  torch::Dtype dtype = torch::kFloat32;  // the drafter's compute dtype
  bool recompute_layers = false;
  int64_t max_attention_scores_per_chunk = 1 << 25;  // as ObjectiveOptions
  int64_t max_logits_per_chunk = 1 << 25;
  int64_t optimizer_floats_per_parameter = 2;  // AdamW's two moments (Muon: one, but its AdamW group: two)
  // The loss (LossMix::chunk_buffers): [rows, V] float32 buffers it holds
  // per chunk of logits, and whether it reads the target's distribution
  // (its last hidden state per token, gathered per trained slot).
  double loss_chunk_buffers = 2;
  bool teacher = false;
  // The kind's params (ObjectiveOptions::kind_options): what its loss terms
  // hold (DrafterKind::loss_memory) may depend on them.
  nlohmann::json kind_options = nlohmann::json::object();
};

struct DrafterMemoryEstimate {
  double parameter_bytes = 0;   // weights, gradients, optimizer state, fp32 masters
  double frozen_bytes = 0;      // the target's embedding and LM head on the drafter's device
  double context_bytes = 0;     // features, context, context K/V and what their ops keep
  double per_anchor_bytes = 0;  // activations per anchor (all layers), chunk copies and masks included
  double transient_bytes = 0;   // one chunk of logits, one layer's backward working set
  int64_t anchors = 0;          // rows * anchors_per_sequence, as estimated
  double total_bytes() const {
    return parameter_bytes + frozen_bytes + context_bytes + transient_bytes + per_anchor_bytes * static_cast<double>(anchors);
  }
};

DrafterMemoryEstimate estimate_drafter_memory(const DrafterSpec& spec, const DrafterMemoryShape& shape);

// The drafter's trainable parameters, the backbone's and its kind's modules'.
double drafter_parameter_count(const DrafterSpec& spec);

// The largest anchors_per_sequence (at most `up_to`) whose estimate fits in
// available_bytes; 0 when not even one anchor does.
int64_t largest_anchors_that_fit(const DrafterSpec& spec, DrafterMemoryShape shape, double available_bytes,
                                 int64_t up_to);

}  // namespace dflow::drafter
