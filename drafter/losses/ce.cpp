// ce: cross-entropy on the data's token (DFlash 2025).
#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

namespace {

class CrossEntropy final : public DraftLoss {
 public:
  std::string name() const override { return "ce"; }
  // The logits (the gradient is built in place) and logsumexp's working copy.
  double chunk_buffers(double) const override { return 2; }
  std::string summary() const override { return "cross-entropy on the data's tokens"; }
  LossChunkResult chunk(LossChunk& c) const override {
    LossChunkResult out;
    const torch::Tensor log_normaliser = torch::logsumexp(c.logits, 1, /*keepdim=*/true);  // [c, 1]
    out.loss = (log_normaliser - c.logits.gather(1, c.labels)).squeeze(1);
    if (c.stats) out.accept_rate = out.loss.neg().exp();  // q(label)
    if (c.gradient) {
      // d(w * CE)/d logits = w * (softmax(logits) - onehot(label)), built in place of the logits.
      out.grad_logits = c.logits.sub_(log_normaliser).exp_();
      out.grad_logits.scatter_add_(1, c.labels, torch::full_like(c.labels, -1, out.grad_logits.options()));
      out.grad_logits.mul_(c.weights.unsqueeze(1));
    }
    return out;
  }
};

}  // namespace

std::shared_ptr<const DraftLoss> ce_loss() { return std::make_shared<CrossEntropy>(); }

}  // namespace dflow::drafter
