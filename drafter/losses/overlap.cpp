#include "drafter/losses/overlap.hpp"

namespace dflow::drafter {

Overlap overlap(LossChunk& c, bool gradient) {
  Overlap out;
  torch::Tensor q = c.logits.sub_(torch::logsumexp(c.logits, 1, /*keepdim=*/true)).exp_();
  torch::Tensor p = c.teacher.sub_(torch::logsumexp(c.teacher, 1, /*keepdim=*/true)).exp_();
  const torch::Tensor below = q.le(p);                      // where min(q, p) is q
  const torch::Tensor q_below = q * below;                  // q there, 0 elsewhere
  const torch::Tensor s = q_below.sum(1, /*keepdim=*/true);  // [c, 1]
  out.alpha = (s + p.masked_fill_(below, 0.0).sum(1, /*keepdim=*/true)).squeeze(1);
  if (gradient) out.grad_alpha = q.mul_(s).sub_(q_below).neg_();  // q (1[q <= p] - s)
  return out;
}

}  // namespace dflow::drafter
