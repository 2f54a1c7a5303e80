#include "drafter/rerank_draft.hpp"

#include <limits>
#include <vector>

namespace dflow::drafter {

BlockDraft draft_by_reranking(const BlockDraftInputs& in, int64_t top_k, torch::Device device,
                              const CandidateScores& scores) {
  BlockDraft out;
  const int64_t slots = in.hidden.size(0) - 1;
  std::vector<torch::Tensor> rows, probability_rows;
  int64_t previous = in.bonus_token;
  for (int64_t k = 1; k <= slots; ++k) {
    const torch::Tensor unary = in.backbone_logits[k - 1].to(device, torch::kFloat32);  // [V]
    const torch::Tensor candidates = std::get<1>(unary.topk(top_k));
    const torch::Tensor score = scores(k, previous, candidates).to(torch::kFloat32);  // [K]
    torch::Tensor row;
    if (in.sampler || in.want_logits)
      row = torch::full_like(unary, -std::numeric_limits<float>::infinity())
                .index_put_({candidates}, score)
                .to(torch::kCPU);
    if (in.sampler) {
      const torch::Tensor q = in.sampler->probabilities(row);
      previous = in.sampler->draw(q);
      probability_rows.push_back(q);
    } else {
      previous = candidates[score.argmax()].item<int64_t>();
    }
    out.drafts.push_back(previous);
    if (in.want_logits) rows.push_back(row);
  }
  if (in.want_logits) out.logits = torch::stack(rows);
  if (in.sampler) out.probabilities = torch::stack(probability_rows);
  return out;
}

}  // namespace dflow::drafter
