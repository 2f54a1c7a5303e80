// The masks of sliding-window draft layers (drafter/block_attention.hpp,
// add_sliding_window): each chunk's (or packed group's) full-attention mask,
// its context part restricted to the window of each query. Built from the
// plan's own masks, so a sliding layer never sees more than a full one.
//
// The keys are narrowed too: a chunk's blocks have sorted anchors, so no
// query of the chunk reaches a key before earliest_anchor - (window - 1);
// those keys are left out of the sliding layer's scores instead of masked,
// so the layer scores about window keys per query, not the whole context.
#include <algorithm>
#include <stdexcept>

#include "drafter/block_attention.hpp"

namespace dflow::drafter {

namespace {

// The keys a sliding layer's chunk reads: the tail of its context from the
// earliest key inside some query's window (the whole context for
// SlidingKeys::whole_context). Returns the offset into the full range.
int64_t narrow_to_window(BlockAttentionChunk& chunk, int64_t sliding_window, SlidingKeys keys) {
  const int64_t window_first = chunk.earliest_anchor - (sliding_window - 1);
  const int64_t offset = keys == SlidingKeys::whole_context
                             ? 0
                             : std::clamp<int64_t>(window_first - chunk.context_first, 0, chunk.context_length);
  chunk.sliding_context_first = chunk.context_first + offset;
  chunk.sliding_context_length = chunk.context_length - offset;
  return offset;
}

// [visible's context columns (already narrowed) AND in_window, own block].
torch::Tensor with_window(const torch::Tensor& context_visible, const torch::Tensor& own_block,
                          const torch::Tensor& in_window) {
  return torch::cat({context_visible & in_window.unsqueeze(1), own_block}, -1);
}

// One packed row's groups: each chunk's narrowed keys, padded to the group's
// longest (a padded key points at its chunk's first position and is masked).
void add_group_windows(BlockAttentionPlan& plan, const torch::Tensor& anchor_positions, int64_t sliding_window,
                       SlidingKeys keys) {
  const int64_t block_size = plan.block_size;
  const torch::Device device = plan.groups.front().visible.device();
  const torch::Tensor slot_anchor = anchor_positions[0].to(device, torch::kInt64).repeat_interleave(block_size);
  const int64_t last_position = std::max<int64_t>(plan.group_context_index.numel() > 0
                                                      ? plan.group_context_index.max().item<int64_t>()
                                                      : 0,
                                                  0);
  std::vector<torch::Tensor> indices;
  int64_t query_offset = 0;
  for (BlockAttentionGroup& group : plan.groups) {
    const int64_t count = group.num_chunks, queries = group.max_queries, context = group.max_context;
    std::vector<int64_t> offsets;
    int64_t longest = 0;
    for (const size_t c : group.members) {
      offsets.push_back(narrow_to_window(plan.chunks[c], sliding_window, keys));
      longest = std::max(longest, plan.chunks[c].sliding_context_length);
    }
    // On the CPU: each (chunk, key)'s context position and its column in the full mask.
    torch::Tensor position = torch::empty({count, longest}, torch::kInt64);
    torch::Tensor column = torch::zeros({count, longest}, torch::kInt64);
    torch::Tensor real = torch::empty({count, longest}, torch::kBool);
    auto pa = position.accessor<int64_t, 2>();
    auto ca = column.accessor<int64_t, 2>();
    auto ra = real.accessor<bool, 2>();
    for (int64_t g = 0; g < count; ++g) {
      const BlockAttentionChunk& chunk = plan.chunks[group.members[static_cast<size_t>(g)]];
      for (int64_t k = 0; k < longest; ++k) {
        ra[g][k] = k < chunk.sliding_context_length;
        ca[g][k] = ra[g][k] ? offsets[static_cast<size_t>(g)] + k : 0;
        pa[g][k] = std::min(ra[g][k] ? chunk.sliding_context_first + k : chunk.context_first, last_position);
      }
    }
    const torch::Tensor positions = position.reshape({-1}).to(device);
    indices.push_back(positions);
    const torch::Tensor slots = plan.group_query_index.narrow(0, query_offset, count * queries);
    query_offset += count * queries;
    // Slot k of a block anchored at a sits at a + k; its window starts at a + k - (W - 1).
    const torch::Tensor slot_position = slot_anchor.index_select(0, slots) + slots.remainder(block_size);
    const torch::Tensor window_start = (slot_position - (sliding_window - 1)).view({count, queries, 1});
    const torch::Tensor in_window = (positions.view({count, 1, longest}) >= window_start) &
                                    real.to(device).view({count, 1, longest});  // [G, Q, C']
    const torch::Tensor full_columns =
        column.to(device).view({count, 1, 1, longest}).expand({count, 1, queries, longest});
    const torch::Tensor context_visible = group.visible.narrow(-1, 0, context).gather(-1, full_columns);
    group.max_sliding_context = longest;
    group.sliding_visible = with_window(context_visible, group.visible.narrow(-1, context, queries), in_window);
  }
  plan.group_sliding_context_index = torch::cat(indices);
}

}  // namespace

void add_sliding_window(BlockAttentionPlan& plan, const torch::Tensor& anchor_positions, int64_t sliding_window,
                        SlidingKeys keys) {
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
    add_group_windows(plan, anchor_positions, sliding_window, keys);
  } else {
    for (BlockAttentionChunk& chunk : plan.chunks) {
      const torch::Device device = chunk.visible.device();
      const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
      const int64_t offset = narrow_to_window(chunk, sliding_window, keys);
      const int64_t first_block = chunk.first_query / block_size, blocks = chunk.num_queries / block_size;
      const torch::Tensor slot_position =
          anchor_positions.to(device, torch::kInt64).narrow(1, first_block, blocks).repeat_interleave(block_size, 1) +
          torch::arange(chunk.num_queries, long_options).remainder(block_size);  // [B, Q]
      const torch::Tensor context_position = torch::arange(
          chunk.sliding_context_first, chunk.sliding_context_first + chunk.sliding_context_length, long_options);
      const torch::Tensor in_window =
          context_position.view({1, 1, -1}) >= (slot_position - (sliding_window - 1)).unsqueeze(-1);  // [B, Q, C']
      chunk.sliding_visible = with_window(chunk.visible.narrow(-1, offset, chunk.sliding_context_length),
                                          chunk.visible.narrow(-1, chunk.context_length, chunk.num_queries), in_window);
    }
  }
  plan.sliding_window = sliding_window;
}

}  // namespace dflow::drafter
