// Speculative decoding with a DFlash drafter (docs/dflash.md, "Drafting and
// acceptance length"), reporting the acceptance length per cycle. Greedy is
// lossless (the output equals the target's own greedy decoding); sampling at
// a temperature keeps the target's distribution exactly (speculative
// sampling: accept draft x with probability min(1, p(x) / q(x)), else draw
// from norm(max(0, p - q)), where q is the drafter's distribution for that
// block position at the same temperature).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "drafter/drafter.hpp"
#include "target/target.hpp"

namespace dflow::drafter {

// The drafter's K/V cache: context entries of committed tokens only (a
// block's own entries are dropped after each pass).
class DrafterContextCache {
 public:
  int64_t length() const { return length_; }
  const std::vector<ContextKV>& per_layer() const { return per_layer_; }
  // Appends the target features [1, T, n*H] of the next T committed tokens
  // (positions length() .. length() + T - 1).
  void append(DFlashDrafterImpl& drafter, const torch::Tensor& context_features);

 private:
  std::vector<ContextKV> per_layer_;  // each [1, KVH, length, D]
  int64_t length_ = 0;
};

// One non-causal draft pass over [bonus, MASK x (B-1)] at positions
// cache.length() .. + B-1, using the spec's mask token (the one trained with).
// Returns the B-1 argmax drafts for slots 1 .. B-1. previous_token: the
// committed token before the bonus (-1: none), for a kind that reads it.
std::vector<int64_t> drafter_generate_block(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                            const DrafterContextCache& cache, int64_t bonus_token,
                                            int64_t previous_token = -1);
// The same pass, returning the logits of slots 1 .. B-1: [B-1, V] on the CPU in float32.
torch::Tensor drafter_block_logits(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                   const DrafterContextCache& cache, int64_t bonus_token,
                                   int64_t previous_token = -1);

struct SpeculativeResult {
  std::vector<int64_t> tokens;                 // generated tokens (prompt excluded)
  std::vector<int64_t> acceptance_lengths;     // tau = accepted drafts + 1 per cycle, in 1 .. B
  // The calibration of the acceptance a drafter kind predicts, per block
  // slot k (index 0 .. B-1, slot 0 unused; empty for a kind that predicts
  // none: KindModules::predicts_acceptance): over the
  // cycles in which slots 1 .. k-1 were all accepted (slot k was verified on
  // a correct prefix), how many there were, the sum of the head's predicted
  // acceptance, and how many of slot k's drafts were accepted.
  // predicted / verified against accepted / verified is the calibration.
  std::vector<double> verified_per_position, predicted_accept_per_position, accepted_per_position;
  double mean_acceptance_length() const;
};

struct SpeculativeOptions {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> eos_token_ids;  // stop after emitting one of these
  double temperature = 0.0;            // <= 0: greedy
  uint64_t seed = 0;                   // sampling: a CPU generator seeded with it
};

// Speculative decoding of up to max_new_tokens after the prompt.
SpeculativeResult speculative_generate(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                       const std::vector<int64_t>& prompt_ids, const SpeculativeOptions& options);
// Greedy.
SpeculativeResult speculative_generate(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                       const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens,
                                       const std::vector<int64_t>& eos_token_ids);

}  // namespace dflow::drafter
