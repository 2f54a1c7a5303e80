// lk_hybrid: the hybrid LK loss (Samarin et al., "LK Losses: Direct
// Acceptance Rate Optimization for Speculative Decoding", arXiv 2602.23881;
// speculators' losses/eager.py lk_hybrid_loss), a per-row blend of KL and
// total variation weighted by the row's own acceptance rate:
//   L = lambda KL(p || q) + (1 - lambda) TV(p, q),  lambda = exp(-eta sg[alpha]),
// alpha = sum_v min(p_v, q_v) = 1 - TV, sg a stop-gradient, p the target's
// distribution and q the drafter's, both at temperature 1. While a row's
// drafts are rarely accepted (alpha near 0, lambda near 1) it follows KL's
// strong gradient; as alpha grows it moves to TV, which is one minus the
// acceptance rate itself. eta is 3.0, the paper's best hybrid and the value
// speculators' loss configs use (its resolve_loss_config passes no eta).
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

constexpr double kEta = 3.0;

class LKHybrid final : public DraftLoss {
 public:
  std::string name() const override { return "lk_hybrid"; }
  std::string summary() const override {
    return "lambda KL(p || q) + (1 - lambda) TV(p, q), lambda = exp(-3 alpha) of the row's detached acceptance "
           "rate alpha: KL's gradient from a cold start, the acceptance rate itself once drafts are accepted";
  }
  bool needs_teacher() const override { return true; }
  // The draft's and the teacher's buffers, p, and a boolean mask (the
  // gradient's); logsumexp's working copy comes before p.
  double chunk_buffers(double) const override { return 3.25; }
  LossChunkResult chunk(LossChunk& c) const override {
    LossChunkResult out;
    torch::Tensor& logits = c.logits;
    torch::Tensor& target = c.teacher;
    logits.sub_(torch::logsumexp(logits, 1, /*keepdim=*/true));  // log q
    target.sub_(torch::logsumexp(target, 1, /*keepdim=*/true));  // log p
    torch::Tensor p = target.exp();
    // KL = sum_v p (log p - log q), in the teacher's buffer.
    const torch::Tensor kl = target.sub_(logits).mul_(p).sum(1);
    torch::Tensor q = logits.exp_();
    at::minimum_out(target, q, p);
    const torch::Tensor alpha = target.sum(1);
    const torch::Tensor lambda = torch::exp(alpha * -kEta);
    out.loss = lambda * kl + (1.0 - lambda) * (1.0 - alpha);
    if (c.stats) out.accept_rate = alpha;
    if (c.gradient) {
      // d L / d z = lambda (q - p) - (1 - lambda) d alpha / d z, with
      // d alpha / d z_j = q_j (1[q_j <= p_j] - s), s the sum of q over
      // {q <= p} (ties count as below, as tv's: drafter/losses/overlap.hpp).
      target.copy_(q).masked_fill_(q.gt(p), 0.0);                    // q where q <= p
      const torch::Tensor s = target.sum(1, /*keepdim=*/true);        // [c, 1]
      p.sub_(q).neg_().mul_(lambda.unsqueeze(1));                     // lambda (q - p)
      q.mul_(s).sub_(target);                                         // -d alpha / d z
      out.grad_logits = q.mul_((1.0 - lambda).unsqueeze(1)).add_(p).mul_(c.weights.unsqueeze(1));
    }
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> lk_hybrid_loss() { return std::make_shared<LKHybrid>(); }

}  // namespace dflow::drafter
