// The DFlash training objective (docs/dflash.md, "Training objective").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "drafter/anchors.hpp"
#include "target/documents.hpp"
#include "drafter/drafter.hpp"
#include "drafter/loss.hpp"
#include "target/target.hpp"

namespace dflow::drafter {

// 7 for block 16, 5 for block 10, 4 for block 8 (the paper's values);
// other block sizes have no published value, so this throws and asks for
// an explicit loss_decay_gamma.
double default_loss_decay_gamma(int64_t block_size);

// How the loss weighs the positions of a draft block.
enum class PositionWeighting {
  // DFlash 2025: w_k = exp(-(k - 1) / gamma), fixed.
  Decay,
  // D-PACE (arXiv 2605.18810): from the drafter's own confidence on the
  // target token, q_i = exp(-CE_i), smoothed q~_i = (1 - alpha) q_i + alpha;
  // w_j = sum_{m >= j} prod_{i <= m} q~_i (the expected accepted tokens from
  // slot j on), detached. Per block, so it never depends on how samples are
  // split across micro-batches or ranks (the step divides by the global sum).
  DPace,
};

struct ObjectiveOptions {
  PositionWeighting weighting = PositionWeighting::Decay;
  double loss_decay_gamma = 0.0;                    // Decay; <= 0: default_loss_decay_gamma(block_size)
  double dpace_alpha = 0.5;                         // DPace: smoothing, in (0, 1]
  int64_t attention_blocks_per_chunk = 0;           // <= 0: sized by max_attention_scores_per_chunk
  int64_t max_attention_scores_per_chunk = 1 << 25;  // B * heads * queries * keys per attention chunk
  int64_t max_logits_per_chunk = 1 << 25;           // rows * vocab of full-vocabulary logits at once
  bool recompute_layers = false;                    // recompute draft-layer activations in backward (same math)
  // What each trained slot's loss compares the drafter with: a registered
  // loss or a weighted mix (drafter/loss.hpp). Chunked: no [tokens,
  // vocabulary] float32 matrix is ever held.
  LossMix loss;
  double kl_temperature = 1.0;  // the losses that use a temperature: both distributions at it (> 0)
  // The acceptance rate per slot under the teacher's distribution (sum
  // min(p, q) at temperature 1) also when no loss term reads the teacher
  // (eval.expected_acceptance): the teacher's states are then required.
  bool expected_acceptance = false;
  bool needs_teacher() const { return loss.needs_teacher() || expected_acceptance; }
  // The drafter kind's params (DrafterKind::read_params), which its extra
  // loss terms read (their weights). Its terms use the slot's analytical
  // acceptance rate 1 - TV(p, q) where they need one; without the target's
  // distribution p is the one-hot of the data's token, so the rate is q(label).
  nlohmann::json kind_options = nlohmann::json::object();
  // Where the run is, for a kind whose terms follow a schedule (DSpine's
  // teacher forcing and alignment warm-up): the optimizer step (0-based),
  // the steps the run's schedule spans (0: unknown) and a seed for the
  // micro-batch's draws.
  int64_t step = 0;
  int64_t total_steps = 0;
  uint64_t draw_seed = 0;
};

// The target's own distribution for the losses that need it (and the
// acceptance rate): its last hidden state after its final norm,
// [B, S, H] like the batch's rows, on any device; row position t gives the
// distribution of the token at t + 1. Through the frozen LM head it is the
// target's logits.
struct TeacherStates {
  torch::Tensor final_hidden;
};

// One micro-batch laid out as draft blocks, on the drafter's device.
struct DraftBlocks {
  torch::Tensor block_tokens;     // [B, N, Bs] int64: token[a], MASK, ..., MASK
  torch::Tensor block_positions;  // [B, N, Bs] int64: a + k
  torch::Tensor labels;           // [B, N, Bs] int64: token[a + k] (0 past the sample's end)
  torch::Tensor valid;            // [B, N, Bs] bool: keep * [a+k < S] * [k > 0] * loss_mask[a+k]
  torch::Tensor weights;          // [B, N, Bs] float: valid * exp(-(k - 1) / gamma)
};

// D-PACE weights of blocks: ce [K, Bs] (each slot's cross-entropy on its
// label; slot 0, the anchor, is never predicted), valid [K, Bs] bool (slots
// that have a label). An invalid slot ends the block's acceptance chain: it
// and every later slot weigh 0. float64 [K, Bs], no gradient.
torch::Tensor dpace_position_weights(const torch::Tensor& ce, const torch::Tensor& valid, double alpha);

// Packed rows (bounds from document_bounds): block positions are within the
// anchor's sample (a - sample start + k) and labels stop at the sample's end.
DraftBlocks build_draft_blocks(const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                               const torch::Tensor& lengths, const AnchorBatch& anchors, int64_t block_size,
                               int64_t mask_token_id, double loss_decay_gamma, torch::Device device,
                               const target::DocumentBounds* bounds = nullptr);

struct ObjectiveOutput {
  // weighted_ce_sum / weight_sum, differentiable; exactly 0 (still
  // back-propagatable) when the micro-batch has no weighted position.
  torch::Tensor loss;
  // sum(w * CE) over the micro-batch, differentiable: back-propagate this
  // and divide the gradients by the step's total weight to get the exact
  // step-level loss sum(w * CE) / sum(w) across micro-batches.
  torch::Tensor loss_sum;
  double weighted_ce_sum = 0.0;
  double weight_sum = 0.0;
  // Per block slot k (index 0 .. Bs-1; k = 0 never counts): argmax == label
  // over valid positions. Sums, so micro-batches add up.
  std::vector<double> correct_per_position;
  std::vector<double> count_per_position;
  int64_t num_anchors = 0;   // kept blocks
  int64_t real_tokens = 0;   // sum of lengths
  int64_t predicted_tokens = 0;  // valid (label-bearing) draft slots
  // Per sample of the micro-batch: sum(w * CE) and sum(w) (detached). Samples
  // in the batch's order (unpacked: one per row; packed: row by row, each
  // row's samples in order, as the plan lists their ids). They add up to
  // weighted_ce_sum and weight_sum; per-bucket statistics are built on them.
  std::vector<double> sample_weighted_ce_sum;
  std::vector<double> sample_weight_sum;
  // The main loss alone, sum(w * loss), and each of the drafter kind's
  // extra terms' sum(w * term) (in its record_terms order): loss_sum is
  // main + sum(weight * term), and weighted_ce_sum / sample_* count them all
  // the same way.
  double main_loss_sum = 0.0;
  std::vector<double> term_loss_sums;
  // Per block slot (like correct_per_position): the analytical acceptance
  // rate sum(1 - TV) over valid slots, and per extra term its slot values'
  // sums (empty for a term without a series). Divided by count_per_position
  // they are per-slot means.
  std::vector<double> accept_rate_per_position;
  std::vector<std::vector<double>> term_series_per_position;
};

// context_features [B, S, n*H] (the target's fused features), input_ids,
// loss_mask [B, S], lengths [B]; anchors from sample_anchors. The embedding
// and LM head are the target's, frozen (never trained here).
ObjectiveOutput dflash_loss(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                            const torch::Tensor& context_features, const torch::Tensor& input_ids,
                            const torch::Tensor& loss_mask, const torch::Tensor& lengths, const AnchorBatch& anchors,
                            const ObjectiveOptions& options);

// The same with the frozen embedding [V, H] and LM head [V, H] given directly.
// Packed rows (documents given; anchors from sample_packed_anchors): each
// block sees context of its own sample strictly before its anchor, at the
// sample's own positions, and its labels never cross the sample's end, so
// the loss is that of the samples run one per row with the same anchors.
ObjectiveOutput dflash_loss(DFlashDrafterImpl& drafter, const torch::Tensor& embedding_weight,
                            const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                            const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                            const torch::Tensor& lengths, const AnchorBatch& anchors, const ObjectiveOptions& options,
                            const target::PackedDocuments* documents = nullptr, const TeacherStates* teacher = nullptr);

}  // namespace dflow::drafter
