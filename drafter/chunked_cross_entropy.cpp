#include "drafter/chunked_cross_entropy.hpp"

#include "drafter/loss.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dflow::drafter {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Dtype reduction_dtype(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// logits of rows [first, first + count) in the weight's dtype, returned in `dtype`: [count, V]
torch::Tensor chunk_logits(const torch::Tensor& hidden, const torch::Tensor& weight, int64_t first, int64_t count,
                           torch::Dtype dtype) {
  const torch::Tensor rows = hidden.narrow(0, first, count).to(weight.scalar_type());
  return at::linear(rows, weight).to(dtype);
}

// What the sweep computes gradients for (a unit output gradient).
struct Wanted {
  bool hidden = false, features = false, bias_weight = false;
  bool any() const { return hidden || features || bias_weight; }
};

// Forward and gradient in one sweep over the chunks (the fused
// linear-cross-entropy trick): the gradients w.r.t. hidden (and the bias's
// features) for a unit output gradient are computed while each chunk's
// logits are at hand and kept ([P, H] and [P, r], as small as the inputs),
// and the bias weight's [V, r] is accumulated; backward only scales them.
// No logits survive a chunk: at most three [rows, V] buffers in the
// reduction dtype live at once (KL: draft, teacher, p), four for js and
// while a KL at a temperature other than 1 takes its acceptance rate at
// temperature 1 (each loss's file says its own).
class ChunkedDraftLoss : public torch::autograd::Function<ChunkedDraftLoss> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& features, const torch::Tensor& bias_weight,
                               const torch::Tensor& labels, const torch::Tensor& teacher,
                               const torch::Tensor& row_weights, double temperature, int64_t rows_per_chunk,
                               const LossMix* loss_mix, bool with_bias, bool grad_hidden, bool grad_features,
                               bool grad_bias_weight, const RowReweight& reweight) {
    const bool with_teacher = loss_mix->needs_teacher() || loss_mix->expected_acceptance;
    const auto red = reduction_dtype(hidden.scalar_type());
    const int64_t rows = hidden.size(0);
    const Wanted wanted{grad_hidden, grad_features, grad_bias_weight};
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(red));
    torch::Tensor predictions = torch::empty({rows}, labels.options());
    torch::Tensor row_loss = torch::empty({rows}, hidden.options().dtype(red));
    torch::Tensor row_weighted = torch::empty({rows}, hidden.options().dtype(red));
    torch::Tensor accept_rate = torch::empty({rows}, hidden.options().dtype(red));
    const bool expected = loss_mix->expected_acceptance && !loss_mix->needs_teacher();
    torch::Tensor expected_accept_rate = torch::empty({expected ? rows : 0}, hidden.options().dtype(red));
    torch::Tensor unit_grad_hidden = wanted.hidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor unit_grad_features = wanted.features ? torch::empty_like(features) : torch::Tensor();
    torch::Tensor unit_grad_bias_weight =
        wanted.bias_weight ? torch::zeros(bias_weight.sizes(), bias_weight.options().dtype(red)) : torch::Tensor();
    // The bias weight's gradient sums over rows, so a reweight's factors
    // (known only after the sweep) cannot scale it afterwards: it is then
    // accumulated in a second sweep with the reweighted row weights.
    const bool bias_weight_later = wanted.bias_weight && static_cast<bool>(reweight);

    // Row statistics (stats) and/or the gradient w.r.t. the chunk's logits for weights w.
    auto sweep_chunk = [&](int64_t first, int64_t count, const torch::Tensor& chunk_weights, bool stats,
                           bool gradient) -> torch::Tensor {
      torch::Tensor logits = chunk_logits(hidden, weight, first, count, red);  // [c, V]
      if (with_bias) logits.add_(chunk_logits(features, bias_weight, first, count, red));
      if (stats) predictions.narrow(0, first, count).copy_(logits.argmax(1));
      LossChunk chunk{logits, labels.narrow(0, first, count).unsqueeze(1),
                      with_teacher ? chunk_logits(teacher, weight, first, count, red) : torch::Tensor(),
                      chunk_weights, temperature, stats, gradient};
      LossChunkResult result = mixed_chunk(*loss_mix, chunk);
      const torch::Tensor& loss = result.loss;
      if (stats) accept_rate.narrow(0, first, count).copy_(result.accept_rate);
      if (stats && expected) expected_accept_rate.narrow(0, first, count).copy_(result.expected_accept_rate);
      if (stats) {
        const torch::Tensor weighted = loss * chunk_weights;
        total += weighted.sum();
        row_loss.narrow(0, first, count).copy_(loss);
        row_weighted.narrow(0, first, count).copy_(weighted);
      }
      return result.grad_logits;
    };

    for (int64_t first = 0; first < rows; first += rows_per_chunk) {
      const int64_t count = std::min(rows_per_chunk, rows - first);
      const torch::Tensor chunk_weights = row_weights.narrow(0, first, count).to(red);
      const torch::Tensor grad_logits = sweep_chunk(first, count, chunk_weights, /*stats=*/true, wanted.any());
      if (wanted.hidden)
        unit_grad_hidden.narrow(0, first, count).copy_(at::matmul(grad_logits.to(weight.scalar_type()), weight));
      if (wanted.features)
        unit_grad_features.narrow(0, first, count)
            .copy_(at::matmul(grad_logits.to(bias_weight.scalar_type()), bias_weight));
      if (wanted.bias_weight && !bias_weight_later)
        unit_grad_bias_weight.add_(at::matmul(grad_logits.t(), features.narrow(0, first, count).to(red)));
    }
    torch::Tensor applied = row_weights.to(red);
    if (reweight) {
      // The factors need every row's loss first: applied after the sweep, to
      // the rows' terms and to the gradients kept per row alike.
      const torch::Tensor factor = reweight(row_loss).to(red);
      row_weighted.mul_(factor);
      applied = applied * factor;
      total = row_weighted.sum();
      if (wanted.hidden) unit_grad_hidden.mul_(factor.unsqueeze(1).to(unit_grad_hidden.scalar_type()));
      if (wanted.features) unit_grad_features.mul_(factor.unsqueeze(1).to(unit_grad_features.scalar_type()));
      if (bias_weight_later) {
        for (int64_t first = 0; first < rows; first += rows_per_chunk) {
          const int64_t count = std::min(rows_per_chunk, rows - first);
          const torch::Tensor grad_logits =
              sweep_chunk(first, count, applied.narrow(0, first, count), /*stats=*/false, /*gradient=*/true);
          unit_grad_bias_weight.add_(at::matmul(grad_logits.t(), features.narrow(0, first, count).to(red)));
        }
      }
    }
    if (wanted.hidden) ctx->saved_data["unit_grad_hidden"] = unit_grad_hidden;
    if (wanted.features) ctx->saved_data["unit_grad_features"] = unit_grad_features;
    if (wanted.bias_weight) ctx->saved_data["unit_grad_bias_weight"] = unit_grad_bias_weight.to(bias_weight.scalar_type());
    ctx->mark_non_differentiable({predictions, row_loss, row_weighted, applied, accept_rate, expected_accept_rate});
    return {total, predictions, row_loss, row_weighted, applied, accept_rate, expected_accept_rate};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto scaled = [&](const char* key) {
      const auto it = ctx->saved_data.find(key);
      if (it == ctx->saved_data.end() || !grad_outputs[0].defined()) return torch::Tensor();
      const torch::Tensor unit = it->second.toTensor();
      return unit * grad_outputs[0].to(unit.scalar_type());
    };
    const torch::Tensor none;
    return {scaled("unit_grad_hidden"), none, scaled("unit_grad_features"), scaled("unit_grad_bias_weight"),
            none, none, none, none, none, none, none, none, none, none, none};
  }
};

void check_rows(const char* who, const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                const torch::Tensor& labels, const torch::Tensor& row_weights) {
  if (hidden.dim() != 2 || lm_head_weight.dim() != 2 || hidden.size(1) != lm_head_weight.size(1) ||
      labels.sizes() != hidden.sizes().slice(0, 1) || row_weights.sizes() != labels.sizes()) {
    throw std::invalid_argument(std::string(who) + ": need hidden [P, H], lm_head [V, H], labels [P], weights [P]; got " +
                                c10::str(hidden.sizes()) + ", " + c10::str(lm_head_weight.sizes()) + ", " +
                                c10::str(labels.sizes()) + ", " + c10::str(row_weights.sizes()));
  }
  if (lm_head_weight.requires_grad()) {
    throw std::invalid_argument(std::string(who) +
                                ": the LM head is frozen; pass a weight that does not require grad");
  }
}

}  // namespace

ChunkedDraftLossResult chunked_draft_loss(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                          const LogitsBias* bias, const torch::Tensor& labels,
                                          const torch::Tensor& teacher_hidden, double temperature,
                                          const torch::Tensor& row_weights, int64_t rows_per_chunk,
                                          const RowReweight& reweight) {
  return chunked_draft_loss(hidden, lm_head_weight, bias, labels, teacher_hidden,
                            LossMix::single(teacher_hidden.defined() ? "kl" : "ce"), temperature, row_weights,
                            rows_per_chunk, reweight);
}

ChunkedDraftLossResult chunked_draft_loss(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                          const LogitsBias* bias, const torch::Tensor& labels,
                                          const torch::Tensor& teacher_hidden, const LossMix& loss,
                                          double temperature, const torch::Tensor& row_weights,
                                          int64_t rows_per_chunk, const RowReweight& reweight) {
  const char* who = "chunked_draft_loss";
  loss.validate();
  check_rows(who, hidden, lm_head_weight, labels, row_weights);
  if (rows_per_chunk < 1) throw std::invalid_argument("chunked_draft_loss: rows_per_chunk must be >= 1");
  torch::Tensor features, bias_weight;
  if (bias != nullptr) {
    features = bias->features;
    bias_weight = bias->weight;
    if (!features.defined() || !bias_weight.defined() || features.dim() != 2 || bias_weight.dim() != 2 ||
        features.size(0) != hidden.size(0) || bias_weight.size(0) != lm_head_weight.size(0) ||
        bias_weight.size(1) != features.size(1)) {
      throw std::invalid_argument(
          "chunked_draft_loss: the logits bias needs features [P, r] and weight [V, r] for hidden " +
          c10::str(hidden.sizes()) + " and LM head " + c10::str(lm_head_weight.sizes()) + "; got " +
          (features.defined() ? c10::str(features.sizes()) : std::string("none")) + " and " +
          (bias_weight.defined() ? c10::str(bias_weight.sizes()) : std::string("none")));
    }
  }
  torch::Tensor teacher;
  const bool reads_teacher = loss.needs_teacher() || loss.expected_acceptance;
  if (reads_teacher && !teacher_hidden.defined())
    throw std::invalid_argument("chunked_draft_loss: loss " + loss.text() +
                                (loss.needs_teacher() ? "" : " with the expected acceptance") +
                                " needs the teacher's hidden states [P, H]; none was given");
  if (reads_teacher) {
    if (teacher_hidden.sizes() != hidden.sizes()) {
      throw std::invalid_argument("chunked_draft_loss: teacher_hidden must be [P, H] like hidden " +
                                  c10::str(hidden.sizes()) + ", got " + c10::str(teacher_hidden.sizes()));
    }
    if (!(temperature > 0.0) || !std::isfinite(temperature)) {
      throw std::invalid_argument("chunked_draft_loss: the KL temperature must be > 0, got " + std::to_string(temperature));
    }
    teacher = teacher_hidden.detach();
  }
  const bool grad_mode = torch::GradMode::is_enabled();
  const bool grad_hidden = grad_mode && hidden.requires_grad();
  const bool grad_features = grad_mode && features.defined() && features.requires_grad();
  const bool grad_bias_weight = grad_mode && bias_weight.defined() && bias_weight.requires_grad();
  // autograd::Function takes no undefined tensor: absent ones travel as empty placeholders.
  const torch::Tensor placeholder = torch::empty({0}, hidden.options());
  const bool with_teacher = teacher.defined(), with_bias = features.defined();
  const variable_list outputs = ChunkedDraftLoss::apply(
      hidden, lm_head_weight, with_bias ? features : placeholder, with_bias ? bias_weight : placeholder,
      labels.to(torch::kInt64), with_teacher ? teacher : placeholder, row_weights,
      loss.uses_temperature() ? temperature : 1.0, rows_per_chunk, &loss, with_bias, grad_hidden, grad_features,
      grad_bias_weight, reweight);
  return {outputs[0], outputs[1], outputs[2], outputs[3], outputs[4], outputs[5],
          loss.expected_acceptance && !loss.needs_teacher() ? outputs[6] : torch::Tensor()};
}

ChunkedCrossEntropyResult chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                                       const torch::Tensor& labels, const torch::Tensor& row_weights,
                                                       int64_t rows_per_chunk, const RowReweight& reweight) {
  check_rows("chunked_linear_cross_entropy", hidden, lm_head_weight, labels, row_weights);
  if (rows_per_chunk < 1) throw std::invalid_argument("chunked_linear_cross_entropy: rows_per_chunk must be >= 1");
  const ChunkedDraftLossResult r = chunked_draft_loss(hidden, lm_head_weight, nullptr, labels, torch::Tensor(), 1.0,
                                                      row_weights, rows_per_chunk, reweight);
  return {r.weighted_loss_sum, r.predictions, r.row_weighted_loss, r.row_weights};
}

}  // namespace dflow::drafter
