// js: the Jensen-Shannon divergence 0.5 KL(p || m) + 0.5 KL(q || m), m =
// (p + q) / 2, p the target's own distribution, q the drafter's, at
// temperature 1: symmetric and at most log 2 (speculators' js_div_loss,
// with m in log space as there).
#include <cmath>

#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

class JensenShannon final : public DraftLoss {
 public:
  std::string name() const override { return "js"; }
  double chunk_buffers(double) const override { return 4; }
  std::string summary() const override {
    return "Jensen-Shannon divergence between the target's own distribution and the draft's, at most log 2";
  }
  bool needs_teacher() const override { return true; }
  // Four [c, V] buffers: log q, log p, log m and one for products.
  LossChunkResult chunk(LossChunk& c) const override {
    LossChunkResult out;
    torch::Tensor& log_q = c.logits.sub_(torch::logsumexp(c.logits, 1, /*keepdim=*/true));
    torch::Tensor& log_p = c.teacher.sub_(torch::logsumexp(c.teacher, 1, /*keepdim=*/true));
    const torch::Tensor log_m = torch::logaddexp(log_q, log_p).sub_(std::log(2.0));
    torch::Tensor scratch = c.stats ? torch::minimum(log_q, log_p).exp_() : torch::empty_like(log_q);
    if (c.stats) out.accept_rate = scratch.sum(1);  // sum min(p, q)
    // KL(p || m), in log p's buffer.
    at::exp_out(scratch, log_p);
    const torch::Tensor kl_p = log_p.sub_(log_m).mul_(scratch).sum(1);
    // KL(q || m): q in log p's buffer, log q - log m in log q's.
    torch::Tensor& q = at::exp_out(log_p, log_q);
    torch::Tensor& log_q_over_m = log_q.sub_(log_m);
    const torch::Tensor kl_q = at::mul_out(scratch, q, log_q_over_m).sum(1);
    out.loss = 0.5 * (kl_p + kl_q);
    // d(w * JS)/d logits = w * q (log(q / m) - KL(q || m)) / 2.
    if (c.gradient)
      out.grad_logits = log_q_over_m.sub_(kl_q.unsqueeze(1)).mul_(q).mul_((0.5 * c.weights).unsqueeze(1));
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> js_loss() { return std::make_shared<JensenShannon>(); }

}  // namespace dflow::drafter
