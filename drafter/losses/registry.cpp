#include "drafter/losses/registry.hpp"

namespace dflow::model {

std::vector<std::shared_ptr<const DraftLoss>> builtin_draft_losses() { return {ce_loss(), kl_loss()}; }

}  // namespace dflow::model
