#include "drafter/anchors.hpp"

#include <algorithm>
#include <stdexcept>

namespace dflow::drafter {

namespace {

uint64_t splitmix64_step(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

AnchorRng::AnchorRng(uint64_t seed, int64_t epoch, int64_t batch_index, int64_t sample_index) : state_(seed) {
  // Fold each key through a full mixing step so that neighbouring keys give
  // unrelated streams.
  for (const int64_t key : {epoch, batch_index, sample_index}) {
    state_ ^= static_cast<uint64_t>(key);
    state_ = splitmix64_step(state_);
  }
}

uint64_t AnchorRng::next() { return splitmix64_step(state_); }

uint64_t AnchorRng::below(uint64_t bound) {
  // Multiply-shift: the bias is at most bound / 2^64, far below anything observable.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
}

std::vector<int64_t> anchor_candidates(const torch::Tensor& loss_mask_row, int64_t real_length) {
  const torch::Tensor mask = loss_mask_row.to(torch::kCPU).ne(0).contiguous();
  const int64_t length = std::min<int64_t>(real_length, mask.size(0));
  const bool* on = mask.data_ptr<bool>();
  std::vector<int64_t> candidates;
  for (int64_t a = 0; a + 1 < length; ++a) {
    if (on[a] && on[a + 1]) candidates.push_back(a);
  }
  return candidates;
}

AnchorBatch sample_anchors(const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                           const AnchorSamplingOptions& options) {
  if (loss_mask.dim() != 2 || lengths.dim() != 1 || lengths.size(0) != loss_mask.size(0)) {
    throw std::invalid_argument("sample_anchors: need loss_mask [B, S] and lengths [B], got " +
                                c10::str(loss_mask.sizes()) + " and " + c10::str(lengths.sizes()));
  }
  if (options.anchors_per_sequence < 1) {
    throw std::invalid_argument("sample_anchors: anchors_per_sequence must be >= 1, got " +
                                std::to_string(options.anchors_per_sequence));
  }
  const int64_t batch = loss_mask.size(0);
  const torch::Tensor lengths_cpu = lengths.to(torch::kCPU, torch::kInt64);
  const torch::Tensor loss_mask_cpu = loss_mask.to(torch::kCPU);
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    AnchorRng rng(options.seed, options.epoch, options.batch_index, b);
    chosen[static_cast<size_t>(b)] = draw_anchors(anchor_candidates(loss_mask_cpu[b], lengths_cpu[b].item<int64_t>()),
                                                  options.anchors_per_sequence, rng);
  }
  return anchor_batch(chosen);
}

std::vector<int64_t> draw_anchors(std::vector<int64_t> candidates, int64_t anchors_per_sequence, AnchorRng& rng) {
  const auto take = std::min<size_t>(candidates.size(), static_cast<size_t>(anchors_per_sequence));
  // Partial Fisher-Yates: the first `take` entries are a uniform sample without replacement.
  for (size_t i = 0; i < take; ++i) {
    const size_t j = i + static_cast<size_t>(rng.below(candidates.size() - i));
    std::swap(candidates[i], candidates[j]);
  }
  candidates.resize(take);
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

AnchorBatch anchor_batch(const std::vector<std::vector<int64_t>>& rows) {
  int64_t blocks_per_sample = 1;
  for (const auto& row : rows) blocks_per_sample = std::max<int64_t>(blocks_per_sample, static_cast<int64_t>(row.size()));
  const auto batch = static_cast<int64_t>(rows.size());
  AnchorBatch anchors;
  anchors.anchor_positions = torch::zeros({batch, blocks_per_sample}, torch::kInt64);
  anchors.block_keep = torch::zeros({batch, blocks_per_sample}, torch::kBool);
  auto positions = anchors.anchor_positions.accessor<int64_t, 2>();
  auto keep = anchors.block_keep.accessor<bool, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = rows[static_cast<size_t>(b)];
    for (size_t i = 0; i < row.size(); ++i) {
      positions[b][static_cast<int64_t>(i)] = row[i];
      keep[b][static_cast<int64_t>(i)] = true;
    }
  }
  return anchors;
}

}  // namespace dflow::drafter
