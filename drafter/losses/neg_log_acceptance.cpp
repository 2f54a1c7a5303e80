// neg_log_acceptance: -log(alpha), alpha = sum_v min(p_v, q_v) the
// acceptance rate against the target's own distribution at temperature 1,
// alpha held at 1e-5 at least (speculators' neg_log_acceptance_loss, the LK
// loss): TV's gradient scaled by 1 / alpha, large while the draft and the
// target barely overlap. Against a one-hot target it is the cross-entropy.
#include "drafter/losses/overlap.hpp"
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

// speculators' _NLA_EPS: below it the loss is flat (no gradient).
constexpr double kLeastAcceptance = 1e-5;

class NegLogAcceptance final : public DraftLoss {
 public:
  std::string name() const override { return "neg_log_acceptance"; }
  // As tv: q, p, q where it is the smaller, logsumexp's working copy and a boolean mask.
  double chunk_buffers(double) const override { return 4.25; }
  std::string summary() const override {
    return "-log(sum min(p, q)): minus the log acceptance rate against the target's own distribution";
  }
  bool needs_teacher() const override { return true; }
  LossChunkResult chunk(LossChunk& c) const override {
    Overlap o = overlap(c, c.gradient);
    LossChunkResult out;
    const torch::Tensor held = o.alpha.clamp_min(kLeastAcceptance);
    out.loss = held.log().neg();
    if (c.stats) out.accept_rate = o.alpha;
    if (c.gradient) {
      // d(w * -log alpha)/d logits = -(w / alpha) d alpha / d logits, 0 where alpha is held.
      const torch::Tensor scale = (c.weights / held).masked_fill_(o.alpha.lt(kLeastAcceptance), 0.0).neg_();
      out.grad_logits = o.grad_alpha.mul_(scale.unsqueeze(1));
    }
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> neg_log_acceptance_loss() { return std::make_shared<NegLogAcceptance>(); }

}  // namespace dflow::drafter
