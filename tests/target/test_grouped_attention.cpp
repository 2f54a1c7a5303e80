// Grouped-query attention without repeated K/V heads (KvHeads::grouped, and
// the folded form CUDA takes with a mask) equals repeating them first (HF
// repeat_kv), forward and backward, for the mask shapes block attention uses.
#include <doctest/doctest.h>

#include "target/layers.hpp"

using namespace dflow::target;

namespace {

struct Grads {
  torch::Tensor out, q, k, v;
};

Grads run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const std::optional<torch::Tensor>& mask,
          bool causal, KvHeads mode) {
  const torch::Tensor ql = q.clone().requires_grad_(true), kl = k.clone().requires_grad_(true);
  const torch::Tensor vl = v.clone().requires_grad_(true);
  const torch::Tensor out = grouped_attention(ql, kl, vl, mask, causal, mode);
  torch::manual_seed(8);
  (out * torch::randn(out.sizes(), out.options())).sum().backward();  // not randn_like: layouts differ
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

void check_close(const Grads& a, const Grads& b) {
  CHECK(torch::allclose(a.out, b.out, 1e-12, 1e-12));
  CHECK(torch::allclose(a.q, b.q, 1e-12, 1e-12));
  CHECK(torch::allclose(a.k, b.k, 1e-12, 1e-12));
  CHECK(torch::allclose(a.v, b.v, 1e-12, 1e-12));
}

}  // namespace

TEST_CASE("Model.GroupedAttention.KvHeadsReadGroupedEqualRepeated") {
  torch::set_num_threads(1);
  torch::manual_seed(4);
  const int64_t batch = 2, heads = 8, kv_heads = 2, queries = 6, keys = 11, dim = 4;
  // A query view of a [B, Q, H, D] tensor, as the drafter's split_heads makes.
  const torch::Tensor q = torch::randn({batch, queries, heads, dim}, torch::kFloat64).transpose(1, 2);
  const torch::Tensor k = torch::randn({batch, kv_heads, keys, dim}, torch::kFloat64);
  const torch::Tensor v = torch::randn({batch, kv_heads, keys, dim}, torch::kFloat64);
  torch::Tensor per_row = torch::rand({batch, 1, queries, keys}) < 0.6;
  per_row.select(-1, 0).fill_(true);  // every query sees a key
  torch::Tensor per_head = torch::rand({batch, heads, queries, keys}) < 0.6;
  per_head.select(-1, 0).fill_(true);
  for (const auto& mask : {std::optional<torch::Tensor>(per_row), std::optional<torch::Tensor>(per_head),
                           std::optional<torch::Tensor>(per_row[0].unsqueeze(0)), std::optional<torch::Tensor>()}) {
    CAPTURE(mask.has_value() ? mask->sizes() : torch::IntArrayRef{});
    const Grads expanded = run(q, k, v, mask, false, KvHeads::expanded);
    check_close(run(q, k, v, mask, false, KvHeads::grouped), expanded);
    check_close(run(q, k, v, mask, false, KvHeads::folded), expanded);
  }
  // Causal (the target's layers): grouped as well.
  const torch::Tensor square_k = k.narrow(2, 0, queries), square_v = v.narrow(2, 0, queries);
  check_close(run(q, square_k, square_v, std::nullopt, true, KvHeads::grouped),
              run(q, square_k, square_v, std::nullopt, true, KvHeads::expanded));
}
