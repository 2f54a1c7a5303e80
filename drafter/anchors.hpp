// Anchor sampling for the DFlash objective: which response positions start a
// draft block. Deterministic per (seed, epoch, batch index, sample index).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dflow::drafter {

struct AnchorBatch {
  torch::Tensor anchor_positions;  // [B, N] int64, CPU; sorted among kept blocks; 0 in padding blocks
  torch::Tensor block_keep;        // [B, N] bool, CPU; false for padding blocks (zero weight)

  int64_t batch_size() const { return anchor_positions.size(0); }
  int64_t blocks_per_sample() const { return anchor_positions.size(1); }
  int64_t num_anchors() const { return block_keep.sum().item<int64_t>(); }
};

struct AnchorSamplingOptions {
  int64_t anchors_per_sequence = 512;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t batch_index = 0;  // position of the batch in the epoch's plan
};

// Candidate anchors of one sample: a with loss_mask[a] == 1,
// loss_mask[a + 1] == 1 and a <= real_length - 2.
std::vector<int64_t> anchor_candidates(const torch::Tensor& loss_mask_row, int64_t real_length);

// loss_mask [B, S] (0/1, any integer, bool or float dtype), lengths [B] real
// lengths. Each sample draws min(candidates, anchors_per_sequence) anchors
// without replacement and sorts them; N = the largest such count over the
// batch (at least 1); shorter rows are filled with padding blocks.
AnchorBatch sample_anchors(const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                           const AnchorSamplingOptions& options);

// Anchors of packed rows: each sample of a row draws its anchors as
// sample_anchors draws them for a row of its own (strictly inside the
// sample's response), with the RNG stream of its index among the batch's
// samples in row order, so the same samples unpacked, one per row in that
// order, draw the same anchors. lengths [B]: real tokens per row (the
// documents from there on are padding). A row's anchors are in increasing
// order; N = the most anchors of any row.
AnchorBatch sample_packed_anchors(const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                                  const torch::Tensor& document_ids, const AnchorSamplingOptions& options);

class AnchorRng;

// Up to `anchors_per_sequence` of `candidates` drawn without replacement
// (partial Fisher-Yates with `rng`), sorted.
std::vector<int64_t> draw_anchors(std::vector<int64_t> candidates, int64_t anchors_per_sequence, AnchorRng& rng);

// One row of blocks per entry of `rows` (anchor positions, sorted), filled
// with padding blocks up to the longest row (at least one block).
AnchorBatch anchor_batch(const std::vector<std::vector<int64_t>>& rows);

// The RNG behind sample_anchors: splitmix64 seeded from the four keys.
class AnchorRng {
 public:
  AnchorRng(uint64_t seed, int64_t epoch, int64_t batch_index, int64_t sample_index);
  uint64_t next();
  uint64_t below(uint64_t bound);  // uniform in [0, bound), bound > 0

 private:
  uint64_t state_;
};

}  // namespace dflow::drafter
