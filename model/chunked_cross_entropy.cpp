#include "model/chunked_cross_entropy.hpp"

#include <algorithm>
#include <stdexcept>

namespace dflow::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Dtype reduction_dtype(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// logits of rows [first, first + count) in the reduction dtype: [count, V]
torch::Tensor chunk_logits(const torch::Tensor& hidden, const torch::Tensor& weight, int64_t first, int64_t count) {
  const torch::Tensor rows = hidden.narrow(0, first, count).to(weight.scalar_type());
  return at::linear(rows, weight).to(reduction_dtype(hidden.scalar_type()));
}

// Forward and gradient in one sweep over the chunks (the fused
// linear-cross-entropy trick): the gradient w.r.t. hidden for a unit output
// gradient is computed while each chunk's logits are at hand and kept
// ([P, H], as small as hidden itself); backward only scales it. Two matmuls
// per chunk instead of three, and no logits survive a chunk.
class ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, const torch::Tensor& row_weights, int64_t rows_per_chunk,
                               bool with_gradient, const RowReweight& reweight) {
    const auto accumulate_dtype = reduction_dtype(hidden.scalar_type());
    const int64_t rows = hidden.size(0);
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(accumulate_dtype));
    torch::Tensor predictions = torch::empty({rows}, labels.options());
    torch::Tensor row_weighted_ce = torch::empty({rows}, hidden.options().dtype(accumulate_dtype));
    torch::Tensor unit_grad_hidden = with_gradient ? torch::empty_like(hidden) : torch::Tensor();
    for (int64_t first = 0; first < rows; first += rows_per_chunk) {
      const int64_t count = std::min(rows_per_chunk, rows - first);
      torch::Tensor logits = chunk_logits(hidden, weight, first, count);  // [c, V]
      const torch::Tensor chunk_labels = labels.narrow(0, first, count).unsqueeze(1);
      const torch::Tensor chunk_weights = row_weights.narrow(0, first, count).to(accumulate_dtype);
      const torch::Tensor log_normaliser = torch::logsumexp(logits, 1, /*keepdim=*/true);  // [c, 1]
      const torch::Tensor ce = (log_normaliser - logits.gather(1, chunk_labels)).squeeze(1);
      const torch::Tensor weighted = ce * chunk_weights;
      total += weighted.sum();
      row_weighted_ce.narrow(0, first, count).copy_(weighted);
      predictions.narrow(0, first, count).copy_(logits.argmax(1));
      if (with_gradient) {
        // d(w * CE)/d logits = w * (softmax(logits) - onehot(label)), built in place of the logits.
        torch::Tensor grad_logits = logits.sub_(log_normaliser).exp_();
        grad_logits.scatter_add_(1, chunk_labels, torch::full_like(chunk_labels, -1, grad_logits.options()));
        grad_logits.mul_(chunk_weights.unsqueeze(1));
        unit_grad_hidden.narrow(0, first, count).copy_(at::matmul(grad_logits.to(weight.scalar_type()), weight));
      }
    }
    torch::Tensor applied = row_weights.to(accumulate_dtype);
    if (reweight) {
      // The factors need every row's CE first: applied after the sweep, to
      // the rows' terms and to the gradient kept per row alike.
      const torch::Tensor factor = reweight(row_weighted_ce / applied.masked_fill(applied.eq(0), 1)).to(accumulate_dtype);
      row_weighted_ce.mul_(factor);
      applied = applied * factor;
      total = row_weighted_ce.sum();
      if (with_gradient) unit_grad_hidden.mul_(factor.unsqueeze(1).to(unit_grad_hidden.scalar_type()));
    }
    if (with_gradient) ctx->saved_data["unit_grad_hidden"] = unit_grad_hidden;
    ctx->mark_non_differentiable({predictions, row_weighted_ce, applied});
    return {total, predictions, row_weighted_ce, applied};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor unit_grad_hidden = ctx->saved_data.at("unit_grad_hidden").toTensor();
    const torch::Tensor grad_hidden = unit_grad_hidden * grad_outputs[0].to(unit_grad_hidden.scalar_type());
    return {grad_hidden, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

ChunkedCrossEntropyResult chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                                       const torch::Tensor& labels, const torch::Tensor& row_weights,
                                                       int64_t rows_per_chunk, const RowReweight& reweight) {
  if (hidden.dim() != 2 || lm_head_weight.dim() != 2 || hidden.size(1) != lm_head_weight.size(1) ||
      labels.sizes() != hidden.sizes().slice(0, 1) || row_weights.sizes() != labels.sizes()) {
    throw std::invalid_argument("chunked_linear_cross_entropy: need hidden [P, H], lm_head [V, H], labels [P], "
                                "weights [P]; got " + c10::str(hidden.sizes()) + ", " + c10::str(lm_head_weight.sizes()) +
                                ", " + c10::str(labels.sizes()) + ", " + c10::str(row_weights.sizes()));
  }
  if (lm_head_weight.requires_grad()) {
    throw std::invalid_argument("chunked_linear_cross_entropy: the LM head is frozen; pass a weight that does not require grad");
  }
  if (rows_per_chunk < 1) throw std::invalid_argument("chunked_linear_cross_entropy: rows_per_chunk must be >= 1");
  const bool with_gradient = torch::GradMode::is_enabled() && hidden.requires_grad();
  const variable_list outputs = ChunkedLinearCrossEntropy::apply(hidden, lm_head_weight, labels.to(torch::kInt64),
                                                                 row_weights, rows_per_chunk, with_gradient, reweight);
  return {outputs[0], outputs[1], outputs[2], outputs[3]};
}

}  // namespace dflow::model
