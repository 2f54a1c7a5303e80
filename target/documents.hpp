// Packed rows: several samples ("documents") laid out one after another in a
// row (data/collate.hpp). A token attends only to earlier tokens of its own
// document, RoPE positions restart at 0 per document, and DFlash anchors,
// context and labels stay inside the anchor's document, so a packed sample is
// computed as it would be alone in a row.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>


namespace dflow::target {

struct PackedDocuments {
  torch::Tensor position_ids;  // [B, S] int64: position within the token's document, from 0
  torch::Tensor document_ids;  // [B, S] int32/int64: the token's document within its row, increasing;
                               // padding after a row's samples is one more document
};

// Per-document causal attention, prepared once per forward and shared by
// every layer. CUDA half/bfloat16 where the kernel runs (varlen_attention.hpp):
// cumulative document lengths over the flattened rows for flash attention's
// variable-length kernel (no mask built). Otherwise: each row's documents as
// spans (always kept), each attended with causal scaled_dot_product_attention, so a row of many short documents
// costs the sum of their squares, not the row's (a dense block-diagonal mask
// over the row would score every pair of the row, and lose the causal kernel).
struct DocumentSpan {
  int64_t row = 0, start = 0, length = 0;
};
struct DocumentAttention {
  std::vector<DocumentSpan> spans;  // span path: every document of every row, in row order
  torch::Tensor cu_seqlens;     // [D + 1] int32, varlen path: document starts over B * S tokens
  int64_t max_document_length = 0;
  bool varlen() const { return cu_seqlens.defined(); }
};
DocumentAttention prepare_document_attention(const torch::Tensor& document_ids, torch::Device device,
                                             torch::Dtype dtype);

// q [B, H, S, D], k/v [B, KVH, S, D] -> [B, H, S, D], each token attending to
// the tokens of its own document up to itself.
torch::Tensor document_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const DocumentAttention& documents);

// Per token: the first position of its document in the row and one past its
// last, [B, S] int64 on CPU.
struct DocumentBounds {
  torch::Tensor begin;
  torch::Tensor end;
};
DocumentBounds document_bounds(const torch::Tensor& document_ids);

// Per token: the index of its sample among the batch's samples in row order
// (the order the drafter's packed anchors and the batch's sample ids use), -1 past
// a row's real length; [B, S] int64 on CPU. lengths [B].
torch::Tensor sample_ordinals(const torch::Tensor& document_ids, const torch::Tensor& lengths);

}  // namespace dflow::target
