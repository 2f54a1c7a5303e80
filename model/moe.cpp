// Routed experts grouped by expert (model/moe.hpp). The op order and dtypes
// follow transformers' Qwen3MoeTopKRouter / GptOssTopKRouter and its default
// "grouped_mm" experts forward: the (token, slot) pairs are sorted by expert,
// each expert's rows go through its MLP in one product, the outputs are
// weighted, put back in (token, slot) order and summed over the slots.
#include "model/moe.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

namespace dflow::model {

namespace {

struct Routing {
  torch::Tensor weights;  // [T, k], x's dtype
  torch::Tensor experts;  // [T, k], int64
};

Routing route(const torch::Tensor& tokens, const ExpertWeights& w, const ExpertOptions& options) {
  const torch::Tensor logits = at::linear(tokens, w.router, w.router_bias);  // [T, E], x's dtype
  Routing routing;
  if (options.router == ExpertRouter::softmax_then_top_k) {
    // Qwen3-MoE: the probabilities in float32, the top-k of them, the cast back.
    const torch::Tensor probs = torch::softmax(logits, -1, torch::kFloat);
    torch::Tensor top;
    std::tie(top, routing.experts) = torch::topk(probs, options.top_k, -1);
    if (options.normalize_top_k) top = top / top.sum(-1, /*keepdim=*/true);
    routing.weights = top.to(logits.scalar_type());
  } else {
    // gpt-oss: the top-k of the logits, a softmax over those k in their dtype.
    torch::Tensor top;
    std::tie(top, routing.experts) = torch::topk(logits, options.top_k, -1);
    routing.weights = torch::softmax(top, 1, top.scalar_type());
  }
  return routing;
}

// The gated activation of gate_up [n, 2I] (gate columns [0, I), up [I, 2I)).
torch::Tensor activate(const torch::Tensor& gate_up, const ExpertOptions& options) {
  const int64_t inter = gate_up.size(-1) / 2;
  torch::Tensor gate = gate_up.narrow(-1, 0, inter);
  torch::Tensor up = gate_up.narrow(-1, inter, inter);
  if (options.activation == ExpertActivation::swiglu) return torch::silu(gate) * up;
  gate = gate.clamp_max(options.swiglu_limit);
  up = up.clamp(-options.swiglu_limit, options.swiglu_limit);
  const torch::Tensor glu = gate * torch::sigmoid(gate * options.swiglu_alpha);
  return (up + 1) * glu;
}

// Bias added after the product, as transformers does (out.add_(bias)), so
// bf16 rounds where it rounds.
torch::Tensor add_bias(torch::Tensor y, const torch::Tensor& bias) {
  return bias.defined() ? y.add_(bias) : y;
}

// The pairs' expert outputs, rows in expert order: one product per expert
// that has rows; one copy of the counts to the host.
torch::Tensor experts_by_loop(const torch::Tensor& rows, const torch::Tensor& sorted_experts, const ExpertWeights& w,
                              const ExpertOptions& options) {
  const int64_t num_experts = w.gate_up.size(0);
  const torch::Tensor counts = torch::bincount(sorted_experts, {}, num_experts).to(torch::kCPU);
  const auto count = counts.accessor<int64_t, 1>();
  torch::Tensor out = torch::empty({rows.size(0), w.down.size(1)}, rows.options());
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    const torch::Tensor mine = rows.narrow(0, start, n);
    const torch::Tensor gate_up =
        add_bias(at::linear(mine, w.gate_up[e]), w.gate_up_bias.defined() ? w.gate_up_bias[e] : torch::Tensor());
    const torch::Tensor down =
        add_bias(at::linear(activate(gate_up, options), w.down[e]), w.down_bias.defined() ? w.down_bias[e] : torch::Tensor());
    out.narrow(0, start, n).copy_(down);
    start += n;
  }
  return out;
}

// LibTorch's grouped GEMM (CUDA, bf16, sm80+): no host sync at all. The
// weights are read in place: gate_up[e].t() is a column-major [H, 2I] view.
bool grouped_mm_applies(const torch::Tensor& rows, const ExpertWeights& w) {
  const auto aligned = [](int64_t n) { return n % 8 == 0; };  // 16-byte strides in bf16
  return rows.is_cuda() && rows.scalar_type() == torch::kBFloat16 && w.gate_up.scalar_type() == torch::kBFloat16 &&
         aligned(rows.size(1)) && aligned(w.down.size(2));
}

torch::Tensor experts_by_grouped_mm(const torch::Tensor& rows, const torch::Tensor& sorted_experts,
                                    const ExpertWeights& w, const ExpertOptions& options) {
  const int64_t num_experts = w.gate_up.size(0);
  const torch::Tensor offsets =
      torch::bincount(sorted_experts, {}, num_experts).cumsum(0, torch::kInt).contiguous();
  torch::Tensor gate_up = at::_grouped_mm(rows, w.gate_up.transpose(1, 2), offsets);
  if (w.gate_up_bias.defined()) gate_up.add_(w.gate_up_bias.index_select(0, sorted_experts));
  torch::Tensor down = at::_grouped_mm(activate(gate_up, options).contiguous(), w.down.transpose(1, 2), offsets);
  if (w.down_bias.defined()) down.add_(w.down_bias.index_select(0, sorted_experts));
  return down;
}

void check(const torch::Tensor& x, const ExpertWeights& w, const ExpertOptions& options) {
  if (!w.defined() || !w.gate_up.defined() || !w.down.defined()) {
    throw std::invalid_argument("routed_experts: the expert weights are not loaded");
  }
  const int64_t hidden = x.size(-1);
  const int64_t num_experts = w.router.size(0);
  if (w.router.dim() != 2 || w.router.size(1) != hidden || w.gate_up.dim() != 3 || w.gate_up.size(0) != num_experts ||
      w.gate_up.size(2) != hidden || w.gate_up.size(1) % 2 != 0 || w.down.dim() != 3 ||
      w.down.size(0) != num_experts || w.down.size(1) != hidden || w.down.size(2) != w.gate_up.size(1) / 2) {
    throw std::invalid_argument("routed_experts: expert weights router " + c10::str(w.router.sizes()) + ", gate_up " +
                                c10::str(w.gate_up.sizes()) + ", down " + c10::str(w.down.sizes()) +
                                " do not fit hidden size " + std::to_string(hidden));
  }
  if (options.top_k < 1 || options.top_k > num_experts) {
    throw std::invalid_argument("routed_experts: top_k " + std::to_string(options.top_k) + " is not in [1, " +
                                std::to_string(num_experts) + "]");
  }
}

}  // namespace

torch::Tensor routed_experts(const torch::Tensor& x, const ExpertWeights& weights, const ExpertOptions& options) {
  check(x, weights, options);
  const int64_t hidden = x.size(-1);
  const torch::Tensor tokens = x.reshape({-1, hidden});
  const int64_t num_tokens = tokens.size(0);
  if (num_tokens == 0) return torch::zeros_like(x);
  const int64_t k = options.top_k;

  const Routing routing = route(tokens, weights, options);
  // Pairs (token, slot) flattened as token * k + slot, sorted by expert.
  torch::Tensor sorted_experts, order;
  std::tie(sorted_experts, order) = torch::sort(routing.experts.reshape({-1}), std::optional<bool>(true), /*dim=*/0);
  const torch::Tensor rows = tokens.index_select(0, torch::div(order, k, "floor"));
  const torch::Tensor outputs = grouped_mm_applies(rows, weights)
                                    ? experts_by_grouped_mm(rows, sorted_experts, weights, options)
                                    : experts_by_loop(rows, sorted_experts, weights, options);
  const torch::Tensor weighted = outputs * routing.weights.reshape({-1}).index_select(0, order).unsqueeze(-1);
  // Back to (token, slot) order, then the sum over the k slots (in float32
  // inside the reduction, as transformers' reshape+sum).
  const torch::Tensor by_pair = torch::empty_like(weighted).index_copy_(0, order, weighted);
  return by_pair.view({num_tokens, k, hidden}).sum(1).to(x.scalar_type()).reshape(x.sizes());
}

}  // namespace dflow::model
