// kl: KL(p || q), p the target's own next-token distribution (its last
// hidden state through its final norm and LM head), q the drafter's, both
// at the temperature (speculators' kl_div_loss at temperature 1).
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

class KLDivergence final : public DraftLoss {
 public:
  std::string name() const override { return "kl"; }
  // Three [c, V] buffers (draft, teacher, p), four at a temperature other
  // than 1 (the acceptance rate at temperature 1 needs both softmaxes).
  double chunk_buffers(double temperature) const override { return temperature == 1.0 ? 3 : 4; }
  std::string summary() const override {
    return "KL(p || q): distillation on the target's own distribution, both at kl_temperature";
  }
  bool needs_teacher() const override { return true; }
  bool uses_temperature() const override { return true; }
  // Three [c, V] buffers at most (draft, teacher, p), four while a
  // temperature other than 1 takes the acceptance rate at temperature 1.
  LossChunkResult chunk(LossChunk& c) const override {
    LossChunkResult out;
    torch::Tensor& logits = c.logits;
    torch::Tensor& target = c.teacher;
    const double temperature = c.temperature;
    if (temperature != 1.0) {
      if (c.stats) {
        // The acceptance rate is at temperature 1 whatever the loss's.
        torch::Tensor q = torch::softmax(logits, 1);
        const torch::Tensor p = torch::softmax(target, 1);
        at::minimum_out(q, q, p);
        out.accept_rate = q.sum(1);
      }
      logits.div_(temperature);
      target.div_(temperature);
    }
    logits.sub_(torch::logsumexp(logits, 1, /*keepdim=*/true));  // log q
    target.sub_(torch::logsumexp(target, 1, /*keepdim=*/true));  // log p
    const torch::Tensor p = target.exp();
    // sum_v p (log p - log q), in the teacher's buffer.
    out.loss = target.sub_(logits).mul_(p).sum(1);
    if (c.stats || c.gradient) {
      torch::Tensor q = logits.exp_();
      if (c.stats && temperature == 1.0) {
        at::minimum_out(target, q, p);
        out.accept_rate = target.sum(1);
      }
      // d(w * KL_T)/d logits = w * (q_T - p_T) / T.
      if (c.gradient) out.grad_logits = q.sub_(p).mul_((c.weights / temperature).unsqueeze(1));
    }
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> kl_loss() { return std::make_shared<KLDivergence>(); }

}  // namespace dflow::drafter
