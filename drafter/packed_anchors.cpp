// Anchors of packed rows (declared in drafter/anchors.hpp): per sample, as
// sample_anchors draws them for a row of its own.
#include <stdexcept>

#include "drafter/anchors.hpp"
#include "target/documents.hpp"

namespace dflow::drafter {

AnchorBatch sample_packed_anchors(const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                                  const torch::Tensor& document_ids, const AnchorSamplingOptions& options) {
  if (loss_mask.dim() != 2 || loss_mask.sizes() != document_ids.sizes() || lengths.dim() != 1 ||
      lengths.size(0) != loss_mask.size(0)) {
    throw std::invalid_argument("sample_packed_anchors: need loss_mask and document_ids [B, S] and lengths [B], got " +
                                c10::str(loss_mask.sizes()) + ", " + c10::str(document_ids.sizes()) + " and " +
                                c10::str(lengths.sizes()));
  }
  if (options.anchors_per_sequence < 1) {
    throw std::invalid_argument("sample_packed_anchors: anchors_per_sequence must be >= 1, got " +
                                std::to_string(options.anchors_per_sequence));
  }
  const int64_t rows = loss_mask.size(0);
  const target::DocumentBounds bounds = target::document_bounds(document_ids);
  const torch::Tensor lengths_cpu = lengths.to(torch::kCPU, torch::kInt64);
  const torch::Tensor mask_cpu = loss_mask.to(torch::kCPU);
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(rows));
  const auto document_end = bounds.end.accessor<int64_t, 2>();
  int64_t sample_index = 0;  // among the batch's samples, in row order
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t real_length = lengths_cpu[r].item<int64_t>();
    auto& row_anchors = chosen[static_cast<size_t>(r)];
    for (int64_t first = 0; first < real_length;) {
      const int64_t last = document_end[r][first];
      // The unpacked rule on the sample alone, shifted to where it sits in the row.
      AnchorRng rng(options.seed, options.epoch, options.batch_index, sample_index);
      const auto drawn = draw_anchors(anchor_candidates(mask_cpu[r].narrow(0, first, last - first), last - first),
                                      options.anchors_per_sequence, rng);
      for (const int64_t a : drawn) row_anchors.push_back(first + a);
      ++sample_index;
      first = last;
    }
  }
  return anchor_batch(chosen);
}

}  // namespace dflow::drafter
