#include "drafter/causal_blocks.hpp"

#include <stdexcept>

namespace dflow::drafter {

namespace {

// visible [B, 1, Q, C + Q]: its own-block part (the last Q keys, in the
// queries' order, block by block) keeps a key only at or before the query.
void keep_earlier_slots(const torch::Tensor& visible) {
  const int64_t queries = visible.size(2);
  const torch::Tensor lower = torch::ones({queries, queries}, visible.options()).tril();
  visible.narrow(3, visible.size(3) - queries, queries).logical_and_(lower);
}

}  // namespace

void make_blocks_causal(BlockAttentionPlan& plan) {
  if (plan.sliding_window > 0)
    throw std::logic_error("make_blocks_causal: apply it before add_sliding_window, whose masks derive from the plan's");
  for (BlockAttentionChunk& chunk : plan.chunks)
    if (chunk.visible.defined()) keep_earlier_slots(chunk.visible);
  for (BlockAttentionGroup& group : plan.groups) keep_earlier_slots(group.visible);
}

}  // namespace dflow::drafter
