// routed_experts (target/moe.hpp) against a naive reference written here:
// token by token, slot by slot, in float64, from the routing rules of
// transformers' Qwen3MoeTopKRouter and GptOssTopKRouter; and against those
// blocks of transformers themselves (tests/target/hf_moe_blocks.py).
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "target/moe.hpp"
#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;

namespace {

struct Shapes {
  int64_t hidden = 16, inter = 8, experts = 8;
};

ExpertWeights random_experts(const Shapes& s, bool biases, int64_t seed) {
  torch::manual_seed(seed);
  const auto scale = [](int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };
  ExpertWeights w;
  w.router = torch::randn({s.experts, s.hidden}, torch::kFloat64) * scale(s.hidden);
  w.gate_up = torch::randn({s.experts, 2 * s.inter, s.hidden}, torch::kFloat64) * scale(s.hidden);
  w.down = torch::randn({s.experts, s.hidden, s.inter}, torch::kFloat64) * scale(s.inter);
  if (biases) {
    w.router_bias = torch::randn({s.experts}, torch::kFloat64) * 0.1;
    w.gate_up_bias = torch::randn({s.experts, 2 * s.inter}, torch::kFloat64) * 0.1;
    w.down_bias = torch::randn({s.experts, s.hidden}, torch::kFloat64) * 0.1;
  }
  return w;
}

ExpertWeights cast(const ExpertWeights& w, torch::Dtype dtype) {
  const auto c = [&](const torch::Tensor& t) { return t.defined() ? t.to(dtype) : t; };
  ExpertWeights out;
  out.router = c(w.router);
  out.router_bias = c(w.router_bias);
  out.gate_up = c(w.gate_up);
  out.gate_up_bias = c(w.gate_up_bias);
  out.down = c(w.down);
  out.down_bias = c(w.down_bias);
  return out;
}

// The k experts a token picks: torch.topk of that token's values alone (what
// transformers calls; among equal values it does not keep the lower index).
std::vector<int64_t> top_k_indices(const std::vector<double>& values, int64_t k) {
  const torch::Tensor picked = std::get<1>(torch::topk(torch::tensor(values, torch::kFloat64), k));
  return {picked.data_ptr<int64_t>(), picked.data_ptr<int64_t>() + k};
}

// The lower indices among ties: what a sort would pick, and not what
// transformers picks.
std::vector<int64_t> lowest_index_top_k(const std::vector<double>& values, int64_t k) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

using Picker = std::vector<int64_t> (*)(const std::vector<double>&, int64_t);

// One token at a time, one slot at a time, float64 throughout.
torch::Tensor naive_experts(const torch::Tensor& x, const ExpertWeights& w64, const ExpertOptions& o,
                            Picker pick = top_k_indices) {
  const int64_t hidden = x.size(-1);
  const torch::Tensor tokens = x.reshape({-1, hidden}).to(torch::kFloat64);
  const int64_t inter = w64.down.size(2);
  torch::Tensor out = torch::zeros_like(tokens);
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    const torch::Tensor xt = tokens[t];
    torch::Tensor logits = w64.router.matmul(xt);
    if (w64.router_bias.defined()) logits = logits + w64.router_bias;
    std::vector<double> values(static_cast<size_t>(logits.size(0)));
    for (int64_t e = 0; e < logits.size(0); ++e) values[e] = logits[e].item<double>();
    std::vector<double> routing_weights;
    std::vector<int64_t> picked;
    if (o.router == ExpertRouter::softmax_then_top_k) {
      const double top = *std::max_element(values.begin(), values.end());
      double total = 0;
      for (double& v : values) total += (v = std::exp(v - top));
      for (double& v : values) v /= total;
      picked = pick(values, o.top_k);
      double kept = 0;
      for (int64_t e : picked) kept += values[e];
      for (int64_t e : picked) routing_weights.push_back(o.normalize_top_k ? values[e] / kept : values[e]);
    } else {
      picked = pick(values, o.top_k);
      double total = 0;
      for (int64_t e : picked) total += std::exp(values[e] - values[picked[0]]);
      for (int64_t e : picked) routing_weights.push_back(std::exp(values[e] - values[picked[0]]) / total);
    }
    for (size_t slot = 0; slot < picked.size(); ++slot) {
      const int64_t e = picked[slot];
      torch::Tensor gate_up = w64.gate_up[e].matmul(xt);
      if (w64.gate_up_bias.defined()) gate_up = gate_up + w64.gate_up_bias[e];
      torch::Tensor gate = gate_up.slice(0, 0, inter), up = gate_up.slice(0, inter, 2 * inter);
      torch::Tensor act;
      if (o.activation == ExpertActivation::swiglu) {
        act = gate / (1 + torch::exp(-gate)) * up;
      } else {
        gate = torch::minimum(gate, torch::full_like(gate, o.swiglu_limit));
        up = torch::clamp(up, -o.swiglu_limit, o.swiglu_limit);
        act = (up + 1) * gate / (1 + torch::exp(-o.swiglu_alpha * gate));
      }
      torch::Tensor y = w64.down[e].matmul(act);
      if (w64.down_bias.defined()) y = y + w64.down_bias[e];
      out[t] += routing_weights[slot] * y;
    }
  }
  return out.reshape(x.sizes());
}

struct Variant {
  const char* name;
  ExpertOptions options;
  bool biases;
};

std::vector<Variant> variants() {
  ExpertOptions qwen;
  qwen.top_k = 2;
  ExpertOptions qwen_norm = qwen;
  qwen_norm.normalize_top_k = true;
  ExpertOptions oss;
  oss.router = ExpertRouter::top_k_then_softmax;
  oss.activation = ExpertActivation::clamped_swiglu;
  oss.top_k = 3;
  oss.swiglu_limit = 0.5;  // small, so that the clamps bite on these activations
  return {{"qwen3_moe", qwen, false},
          {"qwen3_moe norm_topk_prob", qwen_norm, false},
          {"gpt_oss with biases", oss, true},
          {"swiglu with biases", qwen_norm, true}};
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// Float64 inputs: exact but for Qwen3-MoE's router, whose softmax runs in
// float32 whatever x's dtype (as transformers' softmax(dtype=torch.float)).
double float64_tolerance(const ExpertOptions& o) { return o.router == ExpertRouter::softmax_then_top_k ? 1e-6 : 1e-12; }

}  // namespace

TEST_CASE("Model.Moe.RoutedExpertsEqualNaiveFloat64Reference") {
  const Shapes s;
  for (const Variant& v : variants()) {
    CAPTURE(v.name);
    const ExpertWeights w64 = random_experts(s, v.biases, 11);
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{3, 7, s.hidden}, std::vector<int64_t>{20, s.hidden}}) {
      CAPTURE(c10::str(c10::IntArrayRef(shape)));
      const torch::Tensor x = torch::randn(shape, torch::kFloat64);
      const torch::Tensor expected = naive_experts(x, w64, v.options);
      REQUIRE(max_abs(expected) > 0.05);  // not a vacuous comparison
      const torch::Tensor got64 = routed_experts(x, w64, v.options);
      CHECK((got64.sizes() == x.sizes()));
      CHECK(max_abs(got64 - expected) < float64_tolerance(v.options));
      const torch::Tensor got32 = routed_experts(x.to(torch::kFloat32), cast(w64, torch::kFloat32), v.options);
      CHECK((got32.scalar_type() == torch::kFloat32));
      CHECK(max_abs(got32.to(torch::kFloat64) - expected) < 1e-5);
    }
  }
}

TEST_CASE("Model.Moe.Bfloat16WithinTolerance") {
  // bf16 keeps 8 bits of mantissa; x and weights are rounded first, so the
  // reference is run on the rounded values and the outputs differ by the
  // products' roundings: 3% of the output's scale.
  const Shapes s{64, 32, 8};
  for (const Variant& v : variants()) {
    CAPTURE(v.name);
    const ExpertWeights w16 = cast(random_experts(s, v.biases, 12), torch::kBFloat16);
    const torch::Tensor x16 = torch::randn({4, 9, s.hidden}).to(torch::kBFloat16);
    const torch::Tensor got = routed_experts(x16, w16, v.options);
    CHECK((got.scalar_type() == torch::kBFloat16));
    // Routing in bf16 can pick a different expert where two are within a
    // rounding of each other; the reference routes on the rounded logits so
    // both see the same ties at least as often as bf16 itself.
    const torch::Tensor expected = naive_experts(x16.to(torch::kFloat64), cast(w16, torch::kFloat64), v.options);
    const torch::Tensor diff = (got.to(torch::kFloat64) - expected).abs();
    const double scale = max_abs(expected);
    // Per token: most tokens within 3%; a token whose routing flipped in
    // bf16 may differ more, and there must be few of those.
    const torch::Tensor per_token = diff.amax(-1).flatten() / scale;
    const int64_t close = (per_token < 0.03).sum().item<int64_t>();
    CHECK(close >= per_token.size(0) - 2);
  }
}

TEST_CASE("Model.Moe.TiesInRouterLogitsResolveAsTopk") {
  // Identical router rows for experts 1, 4, 6 and 7: every token ties among
  // them (exactly: the inputs are multiples of 1/4, every sum is exact).
  // routed_experts must pick among them as torch.topk does (transformers
  // calls it); the experts differ, so another pick changes the output.
  const Shapes s;
  for (const Variant& v : variants()) {
    CAPTURE(v.name);
    ExpertWeights w64 = random_experts(s, v.biases, 13);
    w64.router.zero_();
    if (w64.router_bias.defined()) w64.router_bias.zero_();
    for (int64_t e : {1, 4, 6, 7}) w64.router[e].fill_(0.25);
    const torch::Tensor x = torch::randint(1, 5, {10, s.hidden}, torch::kFloat64) / 4;  // positive: the tied lead
    const torch::Tensor expected = naive_experts(x, w64, v.options);
    // The tie rule matters here: the lower indices would give another output.
    CHECK(max_abs(naive_experts(x, w64, v.options, lowest_index_top_k) - expected) > 0.01);
    CHECK(max_abs(routed_experts(x, w64, v.options) - expected) < float64_tolerance(v.options));
    CHECK(max_abs(routed_experts(x.to(torch::kFloat32), cast(w64, torch::kFloat32), v.options).to(torch::kFloat64) -
                  expected) < 1e-5);
  }
}

TEST_CASE("Model.Moe.ExpertsWithoutTokensAndSingleToken") {
  // The router sends every token to experts 2 and 5 only: six experts get no
  // token. One token alone, and no token at all, work too.
  const Shapes s;
  ExpertOptions o;
  o.top_k = 2;
  ExpertWeights w64 = random_experts(s, false, 14);
  w64.router.zero_();
  w64.router[2].fill_(1.0);
  w64.router[5].fill_(0.5);
  const torch::Tensor x = torch::rand({2, 5, s.hidden}, torch::kFloat64) + 0.1;
  CHECK(max_abs(routed_experts(x, w64, o) - naive_experts(x, w64, o)) < float64_tolerance(o));
  const torch::Tensor one = torch::randn({1, s.hidden}, torch::kFloat64);
  CHECK(max_abs(routed_experts(one, w64, o) - naive_experts(one, w64, o)) < float64_tolerance(o));
  const torch::Tensor none = torch::zeros({1, 0, s.hidden}, torch::kFloat64);
  CHECK((routed_experts(none, w64, o).sizes() == none.sizes()));
}

TEST_CASE("Model.Moe.RefusesTopKBeyondExpertsAndMismatchedWeights") {
  const Shapes s;
  ExpertOptions o;
  o.top_k = 9;
  const ExpertWeights w = random_experts(s, false, 15);
  const torch::Tensor x = torch::randn({3, s.hidden}, torch::kFloat64);
  CHECK_THROWS_WITH_AS(routed_experts(x, w, o), doctest::Contains("top_k 9"), std::invalid_argument);
  o.top_k = 2;
  CHECK_THROWS_WITH_AS(routed_experts(torch::randn({3, s.hidden + 1}, torch::kFloat64), w, o),
                       doctest::Contains("hidden size"), std::invalid_argument);
}

TEST_CASE("Model.Moe.GroupedGemmOnCudaEqualsTheCpuLoop") {
  // On a GPU in bf16 routed_experts takes at::_grouped_mm; it must give what
  // the CPU's loop over experts gives (both against the float64 reference,
  // within bf16's tolerance). Without a GPU there is nothing to run, and the
  // output says so (tools/gpu_check.sh runs it on a GPU machine).
  if (!torch::cuda::is_available()) {
    MESSAGE("skipped: no CUDA device, and at::_grouped_mm runs on a GPU only; tools/gpu_check.sh runs this case there");
    return;
  }
  const Shapes s{64, 32, 8};
  for (const Variant& v : variants()) {
    CAPTURE(v.name);
    const ExpertWeights w16 = cast(random_experts(s, v.biases, 16), torch::kBFloat16);
    ExpertWeights on_gpu = w16;
    for (torch::Tensor* t : {&on_gpu.router, &on_gpu.router_bias, &on_gpu.gate_up, &on_gpu.gate_up_bias, &on_gpu.down,
                             &on_gpu.down_bias}) {
      if (t->defined()) *t = t->to(torch::kCUDA);
    }
    const torch::Tensor x16 = torch::randn({4, 33, s.hidden}).to(torch::kBFloat16);
    const torch::Tensor cpu = routed_experts(x16, w16, v.options).to(torch::kFloat64);
    const torch::Tensor gpu = routed_experts(x16.to(torch::kCUDA), on_gpu, v.options).cpu().to(torch::kFloat64);
    const torch::Tensor per_token = (gpu - cpu).abs().amax(-1).flatten() / max_abs(cpu);
    CHECK((per_token < 0.03).sum().item<int64_t>() >= per_token.size(0) - 2);
  }
}

namespace {

// Qwen3MoeSparseMoeBlock's parameters are target/moe.hpp's layout already;
// GptOssMLP's gate_up_proj is [E, H, 2I] with gate and up interleaved
// (columns 0, 2, 4, .. the gate), its down_proj [E, I, H].
ExpertWeights from_transformers(const dflow::formats::SafetensorsFile& file, const std::string& family) {
  const auto t = [&](const std::string& name) { return file.tensor(family + "." + name); };
  ExpertWeights w;
  if (family == "qwen3_moe") {
    w.router = t("gate.weight");
    w.gate_up = t("experts.gate_up_proj");
    w.down = t("experts.down_proj");
    return w;
  }
  const torch::Tensor gate_up = t("experts.gate_up_proj"), bias = t("experts.gate_up_proj_bias");
  const auto every_other = [](const torch::Tensor& v, int64_t first) { return v.slice(-1, first, v.size(-1), 2); };
  w.router = t("router.weight");
  w.router_bias = t("router.bias");
  w.gate_up = torch::cat({every_other(gate_up, 0), every_other(gate_up, 1)}, 2).transpose(1, 2).contiguous();
  w.gate_up_bias = torch::cat({every_other(bias, 0), every_other(bias, 1)}, 1);
  w.down = t("experts.down_proj").transpose(1, 2).contiguous();
  w.down_bias = t("experts.down_proj_bias");
  return w;
}

}  // namespace

TEST_CASE("Model.Moe.EqualsTransformersBlocksQwen3MoeAndGptOss") {
  // transformers' Qwen3MoeSparseMoeBlock and GptOssMLP, with its default
  // grouped_mm experts and its eager loop: float32 within 1e-5; bf16 (block
  // and x cast) against grouped_mm within 1% of the output's scale per token
  // (the same op order: measured equal bit for bit for both families),
  // against eager within 3% (it sums the slots in bf16, one rounding per
  // slot: measured 0.6% for gpt-oss).
  torch::set_num_threads(1);
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  dflow::target::testing::ScratchDir dir("hf-moe-blocks");
  const auto path = dir.path() / "blocks.safetensors";
  const auto o = ::dflow::testing::run_command(
      ::dflow::testing::python() + " " + ::dflow::testing::source_dir() + "/tests/target/hf_moe_blocks.py " + path.string(),
      300);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const dflow::formats::SafetensorsFile file(path);
  for (const std::string family : {"qwen3_moe", "gpt_oss"}) {
    CAPTURE(family);
    ExpertOptions options;
    if (family == "qwen3_moe") {
      options.top_k = 2;
      options.normalize_top_k = true;
    } else {
      options.router = ExpertRouter::top_k_then_softmax;
      options.activation = ExpertActivation::clamped_swiglu;
      options.top_k = 3;
      options.swiglu_limit = 1.0;
    }
    const ExpertWeights w = from_transformers(file, family);
    const torch::Tensor x = file.tensor(family + ".x");
    const torch::Tensor got32 = routed_experts(x, w, options);
    const torch::Tensor got16 = routed_experts(x.to(torch::kBFloat16), cast(w, torch::kBFloat16), options).to(torch::kFloat);
    for (const std::string implementation : {"grouped_mm", "eager"}) {
      CAPTURE(implementation);
      const torch::Tensor expected32 = file.tensor(family + "." + implementation + ".float32.out");
      REQUIRE(max_abs(expected32) > 0.1);
      CHECK(torch::allclose(got32, expected32, 1e-5, 1e-5));
      const torch::Tensor expected16 = file.tensor(family + "." + implementation + ".bfloat16.out");
      const torch::Tensor per_token = (got16 - expected16).abs().amax(-1).flatten() / max_abs(expected16);
      CHECK(per_token.max().item<double>() < (implementation == "grouped_mm" ? 0.01 : 0.03));
    }
  }
}
