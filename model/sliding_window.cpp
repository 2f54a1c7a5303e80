// The masks of sliding-window draft layers (model/block_attention.hpp,
// add_sliding_window): each chunk's (or packed group's) full-attention mask,
// its context part restricted to the window of each query. Built from the
// plan's own masks, so a sliding layer never sees more than a full one.
#include <stdexcept>

#include "model/block_attention.hpp"

namespace dflow::model {

namespace {

// visible [.., Q, C + Q] with its first C columns (the context) ANDed with
// in_window [.., Q, C] (broadcast over the head axis).
torch::Tensor restrict_context(const torch::Tensor& visible, const torch::Tensor& in_window, int64_t context) {
  const int64_t keys = visible.size(-1);
  const torch::Tensor own_block = visible.narrow(-1, context, keys - context);
  return torch::cat({visible.narrow(-1, 0, context) & in_window.unsqueeze(1), own_block}, -1);
}

}  // namespace

void add_sliding_window(BlockAttentionPlan& plan, const torch::Tensor& anchor_positions, int64_t sliding_window) {
  if (sliding_window < plan.block_size) {
    throw std::invalid_argument("add_sliding_window: the window (" + std::to_string(sliding_window) +
                                ") must cover a whole block (" + std::to_string(plan.block_size) + ")");
  }
  if (anchor_positions.dim() != 2 || anchor_positions.size(1) != plan.num_blocks) {
    throw std::invalid_argument("add_sliding_window: anchor_positions must be [B, " + std::to_string(plan.num_blocks) +
                                "] as planned, got " + c10::str(anchor_positions.sizes()));
  }
  const int64_t block_size = plan.block_size;
  if (!plan.groups.empty()) {
    // One packed row: the groups' gather indices name each padded query's
    // draft slot and each padded key's context position.
    const torch::Device device = plan.groups.front().visible.device();
    const torch::Tensor slot_anchor = anchor_positions[0].to(device, torch::kInt64).repeat_interleave(block_size);
    int64_t query_offset = 0, context_offset = 0;
    for (BlockAttentionGroup& group : plan.groups) {
      const int64_t count = group.num_chunks, queries = group.max_queries, context = group.max_context;
      const torch::Tensor slots = plan.group_query_index.narrow(0, query_offset, count * queries);
      const torch::Tensor keys = plan.group_context_index.narrow(0, context_offset, count * context);
      query_offset += count * queries;
      context_offset += count * context;
      // Slot k of a block anchored at a sits at a + k; its window starts at a + k - (W - 1).
      const torch::Tensor slot_position = slot_anchor.index_select(0, slots) + slots.remainder(block_size);
      const torch::Tensor window_start = (slot_position - (sliding_window - 1)).view({count, queries, 1});
      const torch::Tensor in_window = keys.view({count, 1, context}) >= window_start;  // [G, Q, C]
      group.sliding_visible = restrict_context(group.visible, in_window, context);
    }
  } else {
    for (BlockAttentionChunk& chunk : plan.chunks) {
      const torch::Device device = chunk.visible.device();
      const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
      const int64_t first_block = chunk.first_query / block_size, blocks = chunk.num_queries / block_size;
      const torch::Tensor slot_position =
          anchor_positions.to(device, torch::kInt64).narrow(1, first_block, blocks).repeat_interleave(block_size, 1) +
          torch::arange(chunk.num_queries, long_options).remainder(block_size);  // [B, Q]
      const torch::Tensor context_position =
          torch::arange(chunk.context_first, chunk.context_first + chunk.context_length, long_options);
      const torch::Tensor in_window =
          context_position.view({1, 1, -1}) >= (slot_position - (sliding_window - 1)).unsqueeze(-1);  // [B, Q, C]
      chunk.sliding_visible = restrict_context(chunk.visible, in_window, chunk.context_length);
    }
  }
  plan.sliding_window = sliding_window;
}

}  // namespace dflow::model
