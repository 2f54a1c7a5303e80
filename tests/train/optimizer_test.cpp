// AdamW against LibTorch's own torch::optim::AdamW on the same gradients, and
// the LR schedule's shape: warmup, cosine / linear decay to 0, constant.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "train/adamw.hpp"
#include "train/muon.hpp"
#include "train/schedule.hpp"

using namespace dflow;

namespace {

struct Pair {
  torch::Tensor ours, reference;
};

// Two identical parameter sets, seeded.
std::vector<Pair> make_parameters(torch::Dtype dtype) {
  torch::manual_seed(7);
  std::vector<Pair> out;
  for (auto shape : {std::vector<int64_t>{5, 3}, std::vector<int64_t>{7}}) {
    // Both start from the same values: a bf16 parameter's master begins at its
    // bf16 value, so the fp32 reference does too.
    auto init = torch::randn(shape, torch::kFloat32).to(dtype).to(torch::kFloat32);
    out.push_back({init.clone().to(dtype).set_requires_grad(true), init.clone().set_requires_grad(true)});
  }
  return out;
}

// Largest |ours - reference| relative to max(|reference|, 1).
double max_difference(const std::vector<Pair>& params) {
  double worst = 0;
  for (const auto& p : params) {
    auto scale = p.reference.detach().abs().clamp_min(1.0);
    worst = std::max(worst, ((p.ours.detach().to(torch::kFloat32) - p.reference.detach()).abs() / scale).max().item<double>());
  }
  return worst;
}

void run_steps(double weight_decay, torch::Dtype dtype, double tolerance) {
  auto params = make_parameters(dtype);
  train::AdamWOptions options;
  options.beta1 = 0.9, options.beta2 = 0.95, options.eps = 1e-8, options.weight_decay = weight_decay;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<torch::Tensor> reference_params;
  for (size_t i = 0; i < params.size(); ++i) {
    named.emplace_back("p" + std::to_string(i), params[i].ours);
    reference_params.push_back(params[i].reference);
  }
  train::AdamW ours(named, options);
  torch::optim::AdamW reference(reference_params, torch::optim::AdamWOptions(1e-2)
                                                      .betas({options.beta1, options.beta2})
                                                      .eps(options.eps)
                                                      .weight_decay(weight_decay));
  torch::manual_seed(11);
  for (int step = 0; step < 20; ++step) {
    const double lr = 1e-2 * (step < 5 ? (step + 1) / 5.0 : 1.0 - (step - 5) / 20.0);  // changes every step
    for (auto& group : reference.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    for (auto& p : params) {
      // Both see the same gradient values (bf16 parameters get bf16 gradients).
      auto grad = (torch::randn(p.reference.sizes()) * (step % 3 + 1)).to(dtype);
      p.ours.mutable_grad() = grad;
      p.reference.mutable_grad() = grad.to(torch::kFloat32);
    }
    ours.step(lr);
    reference.step();
  }
  CHECK(ours.steps_taken() == 20);
  CHECK(max_difference(params) < tolerance);
  if (dtype == torch::kFloat32) return;
  // The fp32 masters follow the fp32 reference exactly (up to fp32 rounding):
  // only the copy into the bf16 parameter is rounded.
  std::map<std::string, torch::Tensor> state;
  for (const auto& [name, tensor] : ours.state_tensors()) state.emplace(name, tensor);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& master = state.at("master.p" + std::to_string(i));
    CHECK((master.scalar_type() == torch::kFloat32));
    CHECK((master - params[i].reference.detach()).abs().max().item<double>() < 1e-5);
  }
}

}  // namespace

TEST_CASE("AdamW.MatchesTorchOptimAdamW") {
  SUBCASE("no weight decay") { run_steps(0.0, torch::kFloat32, 1e-6); }
  SUBCASE("decoupled weight decay") { run_steps(0.1, torch::kFloat32, 1e-6); }
  // bf16 parameters keep fp32 master weights: the update is the fp32 one,
  // rounded once to bf16 (not accumulated in bf16, which would drift).
  // Within one bf16 rounding (2^-8 relative) of the fp32 reference.
  SUBCASE("bf16 parameters with fp32 masters") { run_steps(0.1, torch::kBFloat16, 1.0 / 256); }
}

TEST_CASE("AdamW.ResumesFromStateTensors") {
  // A runs two steps; B starts from A's parameters and state after one and
  // runs the second: both end on the same weights (what a resume relies on).
  auto a = make_parameters(torch::kFloat32);
  auto b = make_parameters(torch::kFloat32);
  train::AdamW first({{"x", a[0].ours}, {"y", a[1].ours}}, {});
  auto grads = [](const std::vector<Pair>& ps, double scale) {
    for (const auto& p : ps) p.ours.mutable_grad() = torch::full_like(p.ours, scale);
  };
  grads(a, 1.0);
  first.step(1e-2);
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, t] : first.state_tensors()) saved.emplace(name, t.clone());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a.size(); ++i) b[i].ours.copy_(a[i].ours);
  }
  train::AdamW second({{"x", b[0].ours}, {"y", b[1].ours}}, {});
  second.load_state_tensors(saved, first.steps_taken());
  grads(a, -0.5), grads(b, -0.5);
  first.step(1e-2);
  second.step(1e-2);
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].ours, b[i].ours));
  saved.erase("exp_avg.x");
  train::AdamW third({{"x", b[0].ours}, {"y", b[1].ours}}, {});
  CHECK_THROWS_WITH(third.load_state_tensors(saved, 1), doctest::Contains("exp_avg.x"));
}

TEST_CASE("Schedule.WarmupThenDecay") {
  train::Schedule s;
  s.peak_lr = 1.0, s.total_steps = 100, s.warmup_ratio = 0.1;
  CHECK(s.warmup_steps() == 10);
  CHECK(s.lr_at(0) == doctest::Approx(0.1));   // the first step already has lr > 0
  CHECK(s.lr_at(9) == doctest::Approx(1.0));   // warmup ends at the peak
  CHECK(s.lr_at(10) == doctest::Approx(1.0));
  CHECK(s.lr_at(55) == doctest::Approx(0.5));  // cosine: half way down at the middle of the decay
  CHECK(s.lr_at(99) == doctest::Approx(0.5 * (1 + std::cos(M_PI * 89.0 / 90.0))));
  CHECK(s.lr_at(100) == doctest::Approx(0.0));  // and 0 at the end
  for (int64_t k = 10; k < 99; ++k) CHECK(s.lr_at(k + 1) <= s.lr_at(k));  // monotone after warmup
  s.kind = "linear";
  CHECK(s.lr_at(55) == doctest::Approx(0.5));
  CHECK(s.lr_at(32) == doctest::Approx(1.0 - 22.0 / 90.0));
  s.kind = "constant";
  CHECK(s.lr_at(99) == doctest::Approx(1.0));
  s.warmup_ratio = 0.0;
  CHECK(s.lr_at(0) == doctest::Approx(1.0));
}

TEST_CASE("Optimizer.GradNormIsOneReductionWithThePerParameterResult") {
  // The norm that optimizer_step logs, clips by and guards on: one read to the
  // host now, the same number as summing each parameter's fp64 squares on the
  // host (as it was computed before), for fp32 and bf16 gradients, a
  // parameter without a gradient, and both optimizers.
  torch::manual_seed(3);
  std::vector<std::pair<std::string, torch::Tensor>> params = {
      {"layers.0.mlp.up_proj.weight", torch::randn({6, 4}).set_requires_grad(true)},
      {"layers.0.self_attn.q_proj.weight", torch::randn({4, 4}).to(torch::kBFloat16).set_requires_grad(true)},
      {"norm.weight", torch::randn({4}).set_requires_grad(true)},
      {"fc.weight", torch::randn({3, 4}).set_requires_grad(true)}};
  for (size_t i = 0; i + 1 < params.size(); ++i)
    params[i].second.mutable_grad() = (torch::randn(params[i].second.sizes()) * (1.0 + i)).to(params[i].second.dtype());
  double squares = 0;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) squares += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const double per_parameter = std::sqrt(squares);
  REQUIRE(per_parameter > 1.0);
  train::AdamW adamw(params, {});
  CHECK(adamw.grad_norm() == doctest::Approx(per_parameter).epsilon(1e-14));
  train::Muon muon(params, {}, {}, 1e-3);
  CHECK(muon.grad_norm() == doctest::Approx(per_parameter).epsilon(1e-14));
  CHECK(train::global_grad_norm({}) == 0.0);
  // Clipping by it scales every gradient to the clipped norm.
  adamw.clip_grad_norm(1.0, adamw.grad_norm());
  CHECK(adamw.grad_norm() == doctest::Approx(1.0).epsilon(1e-2));  // bf16 rounding of one gradient
}

TEST_CASE("Optimizer.DFlash2KernelProjectionsStepAtLrOverTheHiddenSize") {
  // DFlash2's dynamic kernels (drafter/kinds/dflash2: learning_rate_scale)
  // move at lr / hidden size in both optimizers, every other parameter at
  // lr: Adam's first step moves each weight by lr x its factor (the sign of
  // its gradient), Muon's by lr x factor x the orthogonalised update.
  const int64_t hidden = 64;
  auto fresh = [&] {
    std::vector<std::pair<std::string, torch::Tensor>> params{
        {"layers.0.attention_conv.kernel_projection.weight", torch::zeros({16, hidden})},
        {"layers.0.mlp_conv.kernel_projection.weight", torch::zeros({16, hidden})},
        {"layers.0.self_attn.q_proj.weight", torch::zeros({16, hidden})},
        {"layers.0.attention_conv.base_kernel", torch::zeros({2, 2, hidden})}};
    for (auto& [name, p] : params) {
      p.set_requires_grad(true);
      p.mutable_grad() = torch::ones_like(p);
    }
    return params;
  };
  const double lr = 1e-2;
  auto moved = [](const torch::Tensor& p) { return p.detach().abs().max().item<double>(); };
  {
    auto params = fresh();
    train::AdamW adamw(params, {});
    adamw.step(lr);
    CHECK(moved(params[0].second) == doctest::Approx(lr / hidden).epsilon(1e-4));
    CHECK(moved(params[1].second) == doctest::Approx(lr / hidden).epsilon(1e-4));
    CHECK(moved(params[2].second) == doctest::Approx(lr).epsilon(1e-4));
    CHECK(moved(params[3].second) == doctest::Approx(lr).epsilon(1e-4));
  }
  {
    auto params = fresh();
    train::MuonOptions muon;
    muon.weight_decay = 0.0;
    train::Muon optimizer(params, muon, {}, lr);
    optimizer.step(lr);
    // The same orthogonalised update for both matrices (the same gradient).
    const double projection = moved(params[0].second), query = moved(params[2].second);
    CHECK(query > 0.0);
    CHECK(projection == doctest::Approx(query / hidden).epsilon(1e-4));
  }
}
