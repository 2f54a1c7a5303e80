#include "drafter/losses/registry.hpp"

namespace dflow::drafter {

std::vector<std::shared_ptr<const DraftLoss>> builtin_draft_losses() {
  return {ce_loss(), kl_loss(), tv_loss(), js_loss(), reverse_kl_loss(), neg_log_acceptance_loss(),
          lk_hybrid_loss()};
}

}  // namespace dflow::drafter
