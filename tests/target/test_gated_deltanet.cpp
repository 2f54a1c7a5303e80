// The chunked gated delta rule (target/gated_deltanet.hpp) against the rule
// itself, one token at a time (the recurrence transformers'
// torch_recurrent_gated_delta_rule computes), in float64: any chunk size, any
// window of chunks, and a sequence continued from a carried state.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <utility>
#include <vector>

#include "target/gated_deltanet.hpp"

using namespace dflow::target;

namespace {

struct Inputs {
  torch::Tensor q, k, v, decay, beta;  // [B, S, Hk, dk], [B, S, Hk, dk], [B, S, Hv, dv], [B, S, Hv] x2
};

Inputs random_inputs(int64_t length) {
  torch::manual_seed(7);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  return {torch::randn({2, length, 2, 8}, f64), torch::randn({2, length, 2, 8}, f64), torch::randn({2, length, 4, 6}, f64),
          -torch::rand({2, length, 4}, f64) * 2.0, torch::rand({2, length, 4}, f64)};
}

// S <- S exp(g); S <- S + k (beta (v - S^T k))^T; o = S^T q, per value head,
// with L2-normed q and k, q scaled by dk^-1/2.
torch::Tensor recurrence(const Inputs& in, torch::Tensor& state) {
  const int64_t batch = in.v.size(0), length = in.v.size(1), heads = in.v.size(2), groups = heads / in.q.size(2);
  const auto unit = [](const torch::Tensor& x) { return x / (x.pow(2).sum(-1, true) + 1e-6).sqrt(); };
  const torch::Tensor q = unit(in.q).repeat_interleave(groups, 2) / std::sqrt(static_cast<double>(in.q.size(3)));
  const torch::Tensor k = unit(in.k).repeat_interleave(groups, 2);
  std::vector<torch::Tensor> out;
  for (int64_t t = 0; t < length; ++t) {
    state = state * in.decay.select(1, t).exp().view({batch, heads, 1, 1});
    const torch::Tensor k_t = k.select(1, t), q_t = q.select(1, t);  // [B, Hv, dk]
    const torch::Tensor remembered = (state * k_t.unsqueeze(-1)).sum(-2);  // [B, Hv, dv]
    const torch::Tensor delta = (in.v.select(1, t) - remembered) * in.beta.select(1, t).unsqueeze(-1);
    state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
    out.push_back((state * q_t.unsqueeze(-1)).sum(-2));
  }
  return torch::stack(out, 1);  // [B, S, Hv, dv]
}

}  // namespace

TEST_CASE("Model.GatedDeltaRule.ChunksAndWindowsEqualTheRecurrenceTokenByToken") {
  const int64_t length = 150;
  const Inputs in = random_inputs(length);
  torch::Tensor expected_state = torch::zeros({2, 4, 8, 6}, torch::kFloat64);
  const torch::Tensor expected = recurrence(in, expected_state);
  // (chunk, window): transformers' 64 in one window; windows of two 16-token
  // chunks (the [chunk, chunk] matrices built 32 tokens at a time); chunk 1.
  for (const auto& [chunk, window] : std::vector<std::pair<int64_t, int64_t>>{{64, 4096}, {16, 32}, {1, 8}}) {
    CAPTURE(chunk);
    CAPTURE(window);
    torch::Tensor state;
    const torch::Tensor got = chunked_gated_delta_rule(in.q, in.k, in.v, in.decay, in.beta, state, chunk, window);
    CHECK(got.sizes() == expected.sizes());
    CHECK(torch::allclose(got, expected, 1e-9, 1e-9));
    CHECK(torch::allclose(state, expected_state, 1e-9, 1e-9));
  }
}

TEST_CASE("Model.GatedDeltaRule.ASequenceContinuesFromItsCarriedState") {
  const Inputs in = random_inputs(90);
  torch::Tensor whole_state;
  const torch::Tensor whole = chunked_gated_delta_rule(in.q, in.k, in.v, in.decay, in.beta, whole_state);
  const auto part = [&](int64_t start, int64_t count) {
    return Inputs{in.q.narrow(1, start, count), in.k.narrow(1, start, count), in.v.narrow(1, start, count),
                  in.decay.narrow(1, start, count), in.beta.narrow(1, start, count)};
  };
  torch::Tensor state;
  std::vector<torch::Tensor> pieces;
  for (const auto& [start, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 70}, {70, 1}, {71, 19}}) {
    const Inputs p = part(start, count);
    pieces.push_back(chunked_gated_delta_rule(p.q, p.k, p.v, p.decay, p.beta, state));
  }
  CHECK(torch::allclose(torch::cat(pieces, 1), whole, 1e-9, 1e-9));
  CHECK(torch::allclose(state, whole_state, 1e-9, 1e-9));
}
