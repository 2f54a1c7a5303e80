// reverse_kl: KL(q || p) = sum_v q_v (log q_v - log p_v), q the drafter's
// distribution, p the target's own, at temperature 1: mode-seeking where kl
// covers the target's mass (speculators' reverse_kl_div_loss).
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

class ReverseKL final : public DraftLoss {
 public:
  std::string name() const override { return "reverse_kl"; }
  // The three below and logsumexp's working copy.
  double chunk_buffers(double) const override { return 4; }
  std::string summary() const override {
    return "KL(q || p): the draft's distribution against the target's own, mode-seeking";
  }
  bool needs_teacher() const override { return true; }
  // Three [c, V] buffers: log q - log p, q, and log p's (p, then the products).
  LossChunkResult chunk(LossChunk& c) const override {
    LossChunkResult out;
    torch::Tensor& ratio = c.logits.sub_(torch::logsumexp(c.logits, 1, /*keepdim=*/true));  // log q
    const torch::Tensor q = ratio.exp();
    torch::Tensor& p = c.teacher.sub_(torch::logsumexp(c.teacher, 1, /*keepdim=*/true));    // log p
    ratio.sub_(p);                                                                          // log q - log p
    if (c.stats) {
      p.exp_();
      at::minimum_out(p, p, q);
      out.accept_rate = p.sum(1);
    }
    out.loss = at::mul_out(p, q, ratio).sum(1);
    // d(w * KL(q || p))/d logits = w * q (log q - log p - KL(q || p)).
    if (c.gradient) out.grad_logits = ratio.sub_(out.loss.unsqueeze(1)).mul_(q).mul_(c.weights.unsqueeze(1));
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> reverse_kl_loss() { return std::make_shared<ReverseKL>(); }

}  // namespace dflow::drafter
