// Drafting a block by reranking the backbone's candidates, as DFlash2's
// selector and DSpine's refinement draft: slot by slot, the backbone's top k
// at the slot are rescored from the token chosen at the slot before (the
// bonus token for slot 1); greedy takes the best score, sampling draws from
// the softmax of the k scores at the temperature (zero elsewhere), which is
// also the q acceptance must use.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "drafter/kind.hpp"

namespace dflow::drafter {

// The k candidates' scores [k] (float32, on `device`) at `slot` (1-based)
// after `previous`, for `candidates` [k] (int64, on `device`).
using CandidateScores =
    std::function<torch::Tensor(int64_t slot, int64_t previous, const torch::Tensor& candidates)>;

BlockDraft draft_by_reranking(const BlockDraftInputs& in, int64_t top_k, torch::Device device,
                              const CandidateScores& scores);

}  // namespace dflow::drafter
