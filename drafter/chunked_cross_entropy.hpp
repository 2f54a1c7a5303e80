// Weighted cross-entropy through a frozen LM head without materialising
// full-vocabulary logits for all positions: logits are built a chunk of rows
// at a time, and when a gradient is needed it is computed in the same sweep
// and kept as [P, H], so peak memory is one chunk of logits and no logits are
// recomputed in the backward pass.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "drafter/loss.hpp"

namespace dflow::drafter {

struct ChunkedCrossEntropyResult {
  torch::Tensor weighted_ce_sum;  // scalar, differentiable w.r.t. hidden: sum_i w_i * CE_i
  torch::Tensor predictions;      // [P] int64 argmax of the logits (not differentiable)
  torch::Tensor row_weighted_ce;  // [P] w_i * CE_i in the reduction dtype (not differentiable)
  torch::Tensor row_weights;      // [P] the w_i applied (reweighted ones when a reweight was given)
};

// Weights that depend on the rows' own cross-entropies (D-PACE): given CE_i
// [P] (detached, in the reduction dtype) computed with the given row weights,
// returns the factor [P] each row's weight is multiplied by. The factor is a
// constant to the gradient: d(sum f_i w_i CE_i)/dh = f_i w_i dCE_i/dh.
using RowReweight = std::function<torch::Tensor(const torch::Tensor& row_ce)>;

// hidden [P, H] (float32, bfloat16 or float64), lm_head_weight [V, H] frozen
// (must not require grad), labels [P] int64, row_weights [P]. Logits are
// computed in the head's dtype and reduced in float32 (float64 stays
// float64). rows_per_chunk >= 1.
ChunkedCrossEntropyResult chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                                       const torch::Tensor& labels, const torch::Tensor& row_weights,
                                                       int64_t rows_per_chunk, const RowReweight& reweight = {});

// A low-rank addition to the logits that is trained (a drafter kind's):
// logits = hidden W^T + features B^T, features [P, r] (differentiable),
// weight B [V, r] (trainable). Its gradients are computed in the
// same sweep as hidden's.
struct LogitsBias {
  torch::Tensor features;
  torch::Tensor weight;
};

struct ChunkedDraftLossResult {
  // sum_i w_i * loss_i, differentiable w.r.t. hidden and the bias's features
  // and weight (never w.r.t. the LM head or the teacher).
  torch::Tensor weighted_loss_sum;
  torch::Tensor predictions;        // [P] int64 argmax of the draft logits (bias included)
  torch::Tensor row_loss;           // [P] loss_i, detached, in the reduction dtype
  torch::Tensor row_weighted_loss;  // [P] w_i * loss_i, detached
  torch::Tensor row_weights;        // [P] the w_i applied (after a reweight)
  // [P] detached: the analytical acceptance rate sum_v min(p_v, q_v) =
  // 1 - TV(p, q) at temperature 1, q the draft's distribution, p the
  // teacher's (one-hot of the label without a teacher: q(label)).
  torch::Tensor accept_rate;
  // [P] detached, with LossMix::expected_acceptance and a loss that does
  // not read the teacher: sum min(p, q) under the teacher's p (the step
  // records' rate); undefined otherwise.
  torch::Tensor expected_accept_rate;
};

// The draft slots' loss `loss` (drafter/loss.hpp), chunked as
// chunked_linear_cross_entropy (one chunk of [rows, V] logits at a time,
// gradients in the same sweep). A loss that needs the teacher takes
// teacher_hidden [P, H] (the target's last hidden state after its final
// norm, at the position whose next token row i predicts): the teacher's
// logits are teacher_hidden W^T; `temperature` is for the losses that use
// one. bias may be null. reweight (D-PACE) receives the rows' losses.
ChunkedDraftLossResult chunked_draft_loss(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                          const LogitsBias* bias, const torch::Tensor& labels,
                                          const torch::Tensor& teacher_hidden, const LossMix& loss,
                                          double temperature, const torch::Tensor& row_weights,
                                          int64_t rows_per_chunk, const RowReweight& reweight = {});
// The same with `ce` (teacher_hidden undefined) or `kl` (teacher_hidden given).
ChunkedDraftLossResult chunked_draft_loss(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                          const LogitsBias* bias, const torch::Tensor& labels,
                                          const torch::Tensor& teacher_hidden, double temperature,
                                          const torch::Tensor& row_weights, int64_t rows_per_chunk,
                                          const RowReweight& reweight = {});

}  // namespace dflow::drafter
