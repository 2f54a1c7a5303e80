// tv: the total variation distance TV(p, q) = 1 - sum_v min(p_v, q_v), p the
// target's own distribution, q the drafter's, at temperature 1: one minus
// the acceptance rate, which it optimises directly (speculators' tv_loss).
#include "drafter/losses/overlap.hpp"
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

class TotalVariation final : public DraftLoss {
 public:
  std::string name() const override { return "tv"; }
  // q, p, q where it is the smaller, logsumexp's working copy and a boolean mask.
  double chunk_buffers(double) const override { return 4.25; }
  std::string summary() const override {
    return "TV(p, q) = 1 - sum min(p, q): one minus the acceptance rate against the target's own distribution";
  }
  bool needs_teacher() const override { return true; }
  LossChunkResult chunk(LossChunk& c) const override {
    Overlap o = overlap(c, c.gradient);
    LossChunkResult out;
    out.loss = 1.0 - o.alpha;
    if (c.stats) out.accept_rate = o.alpha;
    // d(w * TV)/d logits = -w * d alpha / d logits.
    if (c.gradient) out.grad_logits = o.grad_alpha.mul_(c.weights.neg().unsqueeze(1));
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> tv_loss() { return std::make_shared<TotalVariation>(); }

}  // namespace dflow::drafter
