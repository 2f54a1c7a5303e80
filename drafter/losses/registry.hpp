#pragma once
// The losses dflow ships, one line each in registry.cpp; a loss of its own
// is one file in drafter/losses/ and its line there.
#include <memory>
#include <vector>

#include "drafter/loss.hpp"

namespace dflow::drafter {

std::vector<std::shared_ptr<const DraftLoss>> builtin_draft_losses();

std::shared_ptr<const DraftLoss> ce_loss();
std::shared_ptr<const DraftLoss> kl_loss();
std::shared_ptr<const DraftLoss> tv_loss();
std::shared_ptr<const DraftLoss> js_loss();
std::shared_ptr<const DraftLoss> reverse_kl_loss();
std::shared_ptr<const DraftLoss> neg_log_acceptance_loss();
std::shared_ptr<const DraftLoss> lk_hybrid_loss();

}  // namespace dflow::drafter
