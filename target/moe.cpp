// Routed experts grouped by expert (target/moe.hpp). The op order and dtypes
// follow transformers' Qwen3MoeTopKRouter / GptOssTopKRouter and its default
// "grouped_mm" experts forward: the (token, slot) pairs are sorted by expert,
// each expert's rows go through its MLP in one product, the outputs are
// weighted (rounded to x's dtype) and summed over each token's slots in
// float32, rounded once.
#include "target/moe.hpp"

#include "target/mxfp4.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

namespace dflow::target {

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

// Expert e's [2I, H] and [H, I] projections: views of the dequantized form,
// or its packed blocks dequantized now (freed once the expert is done).
torch::Tensor expert_gate_up(const ExpertWeights& w, int64_t e, torch::Device device) {
  if (!w.packed()) return w.gate_up[e];
  return mxfp4_dequantize(w.gate_up_blocks[e], w.gate_up_scales[e], device, w.packed_dtype);
}
torch::Tensor expert_down(const ExpertWeights& w, int64_t e, torch::Device device) {
  if (!w.packed()) return w.down[e];
  return mxfp4_dequantize(w.down_blocks[e], w.down_scales[e], device, w.packed_dtype);
}

// The whole layer dequantized (for the grouped products, which take every
// expert at once): one layer's experts at a time, never the target's.
ExpertWeights dequantized_layer(const ExpertWeights& w, torch::Device device) {
  ExpertWeights full = w;
  full.gate_up = mxfp4_dequantize(w.gate_up_blocks, w.gate_up_scales, device, w.packed_dtype);
  full.down = mxfp4_dequantize(w.down_blocks, w.down_scales, device, w.packed_dtype);
  full.gate_up_blocks = full.gate_up_scales = full.down_blocks = full.down_scales = torch::Tensor();
  return full;
}

// The (token, slot) pairs sorted by expert: for the sorted pair i, its
// token and its routing weight.
struct SortedPairs {
  torch::Tensor experts;  // [T k], increasing
  torch::Tensor order;    // [T k]: the pair's index token * k + slot
  torch::Tensor tokens;   // [T k]: order / k
  torch::Tensor weights;  // [T k], x's dtype
};

// CPU: one expert at a time, its tokens gathered, its products, its
// weighted output added into a float32 sum over the slots (float64 for
// float64 x). A packed (MXFP4) expert is dequantized here, one expert's
// weights at a time. Every buffer is one expert's (a few hundred rows, hot in
// cache), never one of all T k pairs: on the CPU a large fresh tensor costs
// its page faults, more than the copies themselves. The bias is added after
// the product, as transformers does (out.add_(bias)), so bf16 rounds where
// it rounds; the weighted output is rounded to x's dtype before the sum, as
// transformers' weighted_out is. One copy of the counts to the host.
torch::Tensor experts_by_loop(const torch::Tensor& tokens, const SortedPairs& pairs, const ExpertWeights& w,
                              const ExpertOptions& options) {
  const int64_t num_experts = w.num_experts();
  const torch::Tensor counts = torch::bincount(pairs.experts, {}, num_experts).to(torch::kCPU);
  const auto count = counts.accessor<int64_t, 1>();
  const auto sum_dtype = tokens.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  torch::Tensor sum = torch::zeros({tokens.size(0), w.hidden_size()}, tokens.options().dtype(sum_dtype));
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    const torch::Tensor mine = pairs.tokens.narrow(0, start, n);
    torch::Tensor gate_up = at::mm(tokens.index_select(0, mine), expert_gate_up(w, e, tokens.device()).t());
    if (w.gate_up_bias.defined()) gate_up.add_(w.gate_up_bias[e]);
    torch::Tensor out = at::mm(activate(gate_up, options), expert_down(w, e, tokens.device()).t());
    if (w.down_bias.defined()) out.add_(w.down_bias[e]);
    out.mul_(pairs.weights.narrow(0, start, n).unsqueeze(-1));
    sum.index_add_(0, mine, out.to(sum_dtype));
    start += n;
  }
  return sum.to(tokens.scalar_type());
}

// LibTorch's grouped GEMM (CUDA, bf16, sm80+): no host sync at all. The
// weights are read in place: gate_up[e].t() is a column-major [H, 2I] view.
bool grouped_mm_applies(const torch::Tensor& tokens, const ExpertWeights& w) {
  const auto aligned = [](int64_t n) { return n % 8 == 0; };  // 16-byte strides in bf16
  const auto weight_dtype = w.packed() ? w.packed_dtype : w.gate_up.scalar_type();
  return tokens.is_cuda() && tokens.scalar_type() == torch::kBFloat16 && weight_dtype == torch::kBFloat16 &&
         aligned(tokens.size(1)) && aligned(w.intermediate_size());
}

// All pairs' rows at once through the grouped products, then (deterministic,
// no atomics) put back in (token, slot) order and summed over the k slots in
// float32 inside the reduction, exactly transformers' grouped_mm forward.
torch::Tensor experts_by_grouped_mm(const torch::Tensor& tokens, const SortedPairs& pairs, int64_t k,
                                    const ExpertWeights& w, const ExpertOptions& options) {
  const int64_t num_experts = w.num_experts();
  const torch::Tensor offsets = torch::bincount(pairs.experts, {}, num_experts).cumsum(0, torch::kInt).contiguous();
  torch::Tensor rows = tokens.index_select(0, pairs.tokens);
  torch::Tensor gate_up = at::_grouped_mm(rows, w.gate_up.transpose(1, 2), offsets);
  if (w.gate_up_bias.defined()) gate_up.add_(w.gate_up_bias.index_select(0, pairs.experts));
  torch::Tensor out = at::_grouped_mm(activate(gate_up, options).contiguous(), w.down.transpose(1, 2), offsets);
  if (w.down_bias.defined()) out.add_(w.down_bias.index_select(0, pairs.experts));
  out.mul_(pairs.weights.unsqueeze(-1));
  const torch::Tensor by_pair = rows.index_copy_(0, pairs.order, out);  // the rows' buffer, no longer needed
  return by_pair.view({tokens.size(0), k, tokens.size(1)}).sum(1).to(tokens.scalar_type());
}

std::string shapes(const ExpertWeights& w) {
  if (w.packed()) {
    return "router " + c10::str(w.router.sizes()) + ", gate_up_blocks " + c10::str(w.gate_up_blocks.sizes()) +
           ", gate_up_scales " + c10::str(w.gate_up_scales.sizes()) + ", down_blocks " +
           c10::str(w.down_blocks.sizes()) + ", down_scales " + c10::str(w.down_scales.sizes());
  }
  return "router " + c10::str(w.router.sizes()) + ", gate_up " + c10::str(w.gate_up.sizes()) + ", down " +
         c10::str(w.down.sizes());
}

bool packed_shapes_fit(const ExpertWeights& w, int64_t hidden) {
  const auto& gb = w.gate_up_blocks;
  const auto& db = w.down_blocks;
  if (!gb.defined() || !w.gate_up_scales.defined() || !db.defined() || !w.down_scales.defined()) return false;
  if (gb.dim() != 4 || db.dim() != 4 || gb.scalar_type() != torch::kUInt8 || db.scalar_type() != torch::kUInt8) {
    return false;
  }
  const int64_t e = w.router.size(0), inter = db.size(2) * 32;
  return gb.sizes() == c10::IntArrayRef({e, 2 * inter, hidden / 32, 16}) && hidden % 32 == 0 &&
         w.gate_up_scales.sizes() == gb.sizes().slice(0, 3) && db.sizes() == c10::IntArrayRef({e, hidden, inter / 32, 16}) &&
         w.down_scales.sizes() == db.sizes().slice(0, 3);
}

void check(const torch::Tensor& x, const ExpertWeights& w, const ExpertOptions& options) {
  if (!w.defined() || (!w.packed() && (!w.gate_up.defined() || !w.down.defined()))) {
    throw std::invalid_argument("routed_experts: the expert weights are not loaded");
  }
  const int64_t hidden = x.size(-1);
  const int64_t num_experts = w.router.size(0);
  const bool fit = w.router.dim() == 2 && w.router.size(1) == hidden &&
                   (w.packed() ? packed_shapes_fit(w, hidden)
                               : w.gate_up.dim() == 3 && w.gate_up.size(0) == num_experts &&
                                     w.gate_up.size(2) == hidden && w.gate_up.size(1) % 2 == 0 && w.down.dim() == 3 &&
                                     w.down.size(0) == num_experts && w.down.size(1) == hidden &&
                                     w.down.size(2) == w.gate_up.size(1) / 2);
  if (!fit) {
    throw std::invalid_argument("routed_experts: expert weights " + shapes(w) + " do not fit hidden size " +
                                std::to_string(hidden));
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
  SortedPairs pairs;
  std::tie(pairs.experts, pairs.order) =
      torch::sort(routing.experts.reshape({-1}), std::optional<bool>(true), /*dim=*/0);
  pairs.tokens = torch::div(pairs.order, k, "floor");
  pairs.weights = routing.weights.reshape({-1}).index_select(0, pairs.order);
  torch::Tensor out;
  if (grouped_mm_applies(tokens, weights)) {
    out = weights.packed() ? experts_by_grouped_mm(tokens, pairs, k, dequantized_layer(weights, tokens.device()), options)
                           : experts_by_grouped_mm(tokens, pairs, k, weights, options);
  } else {
    out = experts_by_loop(tokens, pairs, weights, options);
  }
  return out.reshape(x.sizes());
}

int64_t ExpertWeights::projection_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor* t : {&gate_up, &down, &gate_up_blocks, &gate_up_scales, &down_blocks, &down_scales}) {
    if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

}  // namespace dflow::target
