// gpt-oss's attention pieces (target/gpt_oss_layers.hpp) against the formula
// written out as transformers' eager_attention_forward computes it, in
// float64: sinks joining every softmax, windows of several widths, queries
// after a cache's keys, grouped heads, and rows long enough that a sliding
// layer's queries run in several chunks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "target/gpt_oss_layers.hpp"

using namespace dflow::target;

namespace {

// softmax over [q.k / sqrt(D) for visible keys, sink], the sink dropped.
torch::Tensor eager_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& sinks, int64_t query_start, int64_t window) {
  const int64_t heads = q.size(1), queries = q.size(2), keys = k.size(2);
  const torch::Tensor kk = expand_kv_heads(k, heads / k.size(1)), vv = expand_kv_heads(v, heads / v.size(1));
  torch::Tensor scores = torch::matmul(q, kk.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor p = (torch::arange(queries, torch::kInt64) + query_start).unsqueeze(1);
  const torch::Tensor j = torch::arange(keys, torch::kInt64).unsqueeze(0);
  torch::Tensor visible = j <= p;
  if (window > 0) visible = visible & (j > p - window);
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor sink = sinks.view({1, heads, 1, 1}).expand({q.size(0), heads, queries, 1});
  const torch::Tensor probs = torch::softmax(torch::cat({scores, sink}, -1), -1).narrow(-1, 0, keys);
  return torch::matmul(probs, vv);
}

}  // namespace

TEST_CASE("Model.SinkAttention.EqualsTheEagerFormulaForEveryWindowAndOffset") {
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t batch = 2, heads = 4, kv_heads = 2, head_dim = 16;
  const torch::Tensor sinks = torch::randn({heads}, f64) * 2;
  struct Case {
    int64_t queries, query_start, window;
  };
  // 300 queries over a window of 4 or 50: several chunks of queries.
  for (const Case c : {Case{300, 0, 4}, Case{300, 0, 50}, Case{300, 0, 0}, Case{1, 40, 4}, Case{7, 40, 4},
                       Case{200, 70, 129}, Case{1, 0, 4}, Case{5, 2, 0}}) {
    CAPTURE(c.queries);
    CAPTURE(c.query_start);
    CAPTURE(c.window);
    const int64_t keys = c.query_start + c.queries;
    const torch::Tensor q = torch::randn({batch, heads, c.queries, head_dim}, f64) * 2;
    const torch::Tensor k = torch::randn({batch, kv_heads, keys, head_dim}, f64) * 2;
    const torch::Tensor v = torch::randn({batch, kv_heads, keys, head_dim}, f64);
    const torch::Tensor got = causal_sink_attention(q, k, v, sinks, c.query_start, c.window);
    const torch::Tensor expected = eager_reference(q, k, v, sinks, c.query_start, c.window);
    CHECK(torch::allclose(got, expected, 1e-10, 1e-10));
    // The sink is in: without it every row's weights would sum to one.
    CHECK_FALSE(torch::allclose(got, eager_reference(q, k, v, sinks - 1e3, c.query_start, c.window), 1e-3, 1e-3));
  }
  CHECK_THROWS_WITH_AS(causal_sink_attention(torch::zeros({1, 4, 3, 16}, f64), torch::zeros({1, 2, 4, 16}, f64),
                                             torch::zeros({1, 2, 4, 16}, f64), sinks, 0, 4),
                       doctest::Contains("4 keys for queries at 0 .. 2"), std::invalid_argument);
}

TEST_CASE("Model.SinkAttention.PackedDocumentsAttendAlone") {
  torch::manual_seed(5);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor sinks = torch::randn({4}, f64);
  const torch::Tensor q = torch::randn({1, 4, 150, 8}, f64), k = torch::randn({1, 2, 150, 8}, f64);
  const torch::Tensor v = torch::randn({1, 2, 150, 8}, f64);
  const torch::Tensor ids = torch::cat({torch::zeros({140}, torch::kInt64), torch::ones({10}, torch::kInt64)}).unsqueeze(0);
  const DocumentAttention documents = prepare_document_attention(ids, torch::kCPU, torch::kFloat64);
  const torch::Tensor got = document_sink_attention(q, k, v, sinks, documents, 6);
  auto part = [](const torch::Tensor& x, int64_t start, int64_t length) { return x.narrow(2, start, length); };
  CHECK(torch::allclose(got.narrow(2, 0, 140), eager_reference(part(q, 0, 140), part(k, 0, 140), part(v, 0, 140), sinks, 0, 6),
                        1e-10, 1e-10));
  CHECK(torch::allclose(got.narrow(2, 140, 10),
                        eager_reference(part(q, 140, 10), part(k, 140, 10), part(v, 140, 10), sinks, 0, 6), 1e-10, 1e-10));
}
