#pragma once
// The overlap of the draft's and the target's distributions, alpha =
// sum_v min(q_v, p_v) = 1 - TV(p, q), the speculative-decoding acceptance
// rate, and its gradient: what tv and neg_log_acceptance are built from.
#include "drafter/loss.hpp"

namespace dflow::drafter {

struct Overlap {
  torch::Tensor alpha;       // [c]
  torch::Tensor grad_alpha;  // [c, V] d alpha / d logits (when asked), in the chunk's logits buffer
};

// q = softmax(logits), p = softmax(teacher), both at temperature 1, in place
// of the chunk's buffers (three [c, V] float buffers and a [c, V] mask at
// most). d alpha / d z_j = q_j (1[q_j <= p_j] - s), s the sum of q over
// {q <= p}: the tokens where the draft is below the target count, ties
// with them (speculators' convention).
Overlap overlap(LossChunk& c, bool gradient);

}  // namespace dflow::drafter
