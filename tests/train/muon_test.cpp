// Muon against torch.optim.Muon (hidden matrices) and torch.optim.AdamW (the
// rest) on the same gradients for several steps with a changing learning
// rate; fp32 masters under bf16; its state restored exactly; no hidden
// matrix refused.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.hpp"
#include "tools/run_command.hpp"
#include "train/muon.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

// A small drafter-like set: two hidden matrices (one tall, one wide), a norm
// weight, a bias, an embedding (2-D, but not hidden).
std::vector<std::pair<std::string, torch::Tensor>> make_parameters(torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"layers.0.mlp.down_proj.weight", {12, 6}},
           {"layers.0.self_attn.q_proj.weight", {6, 10}},
           {"layers.0.input_layernorm.weight", {6}},
           {"fc.bias", {6}},
           {"embed_tokens.weight", {9, 6}}}) {
    // A bf16 parameter's master starts at its bf16 value; the reference does too.
    const auto init = torch::randn(shape, torch::kFloat32).to(dtype).to(torch::kFloat32);
    out.emplace_back(name, init.to(dtype).set_requires_grad(true));
  }
  return out;
}

std::vector<double> values(const torch::Tensor& t) {
  const torch::Tensor v = t.detach().to(torch::kFloat64).contiguous().flatten();
  return {v.data_ptr<double>(), v.data_ptr<double>() + v.numel()};
}

struct Reference {
  std::map<std::string, std::vector<double>> params;
};

// Runs `steps` steps of ours and of the Python reference on the same gradients.
Reference run_reference(const std::vector<std::pair<std::string, torch::Tensor>>& start, const train::Muon& ours,
                        const std::vector<std::map<std::string, torch::Tensor>>& grads, const std::vector<double>& lrs,
                        const train::MuonOptions& mo, const train::AdamWOptions& ao, double base_lr) {
  nlohmann::json spec;
  for (const auto& [name, p] : start) spec["params"][name] = {{"shape", p.sizes().vec()}, {"values", values(p)}};
  spec["muon"] = ours.muon_names();
  spec["muon_options"] = {{"weight_decay", mo.weight_decay}, {"momentum", mo.momentum}, {"nesterov", mo.nesterov},
                          {"ns_coefficients", mo.ns_coefficients}, {"eps", mo.eps}, {"ns_steps", mo.ns_steps}};
  spec["adamw_options"] = {{"beta1", ao.beta1}, {"beta2", ao.beta2}, {"eps", ao.eps}, {"weight_decay", ao.weight_decay}};
  for (size_t s = 0; s < grads.size(); ++s) {
    nlohmann::json step = {{"lr", lrs[s]}, {"muon_lr", mo.lr * lrs[s] / base_lr}};
    for (const auto& [name, g] : grads[s]) step["grads"][name] = values(g);
    spec["steps"].push_back(step);
  }
  const fs::path dir = fs::temp_directory_path() / ("dflow-muon-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.json") << spec.dump();
  if (testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto run = testing::run_command(testing::python() + " " + testing::source_dir() + "/tests/train/muon_reference.py " +
                                            (dir / "in.json").string() + " " + (dir / "out.json").string(),
                                        120);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  Reference r;
  const nlohmann::json out = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  for (const auto& [name, v] : out.items())
    r.params[name] = v.get<std::vector<double>>();
  if (!getenv("DFLOW_KEEP_MUON")) fs::remove_all(dir);
  return r;
}

void check_against_torch(torch::Dtype dtype, double tolerance) {
  auto params = make_parameters(dtype, 5);
  std::vector<std::pair<std::string, torch::Tensor>> start;
  for (const auto& [name, p] : params) start.emplace_back(name, p.detach().to(torch::kFloat32).clone());
  train::MuonOptions mo;
  mo.lr = 0.02;
  mo.weight_decay = 0.1;
  train::AdamWOptions ao;
  ao.weight_decay = 0.01;
  const double base_lr = 1e-3;
  train::Muon ours(params, mo, ao, base_lr);
  CHECK(ours.muon_names() == std::vector<std::string>{"layers.0.mlp.down_proj.weight", "layers.0.self_attn.q_proj.weight"});
  CHECK(ours.adamw_names() ==
        std::vector<std::string>{"layers.0.input_layernorm.weight", "fc.bias", "embed_tokens.weight"});

  std::vector<std::map<std::string, torch::Tensor>> grads;
  std::vector<double> lrs;
  torch::manual_seed(9);
  for (int step = 0; step < 6; ++step) {
    std::map<std::string, torch::Tensor> g;
    for (auto& [name, p] : params) {
      g[name] = torch::randn(p.sizes(), torch::kFloat32).to(dtype).to(torch::kFloat32);
      p.mutable_grad() = g[name].to(dtype);
    }
    lrs.push_back(base_lr * (step < 2 ? (step + 1) / 2.0 : 1.0 - (step - 2) / 8.0));  // warmup, then decay
    ours.step(lrs.back());
    grads.push_back(std::move(g));
  }
  const Reference reference = run_reference(start, ours, grads, lrs, mo, ao, base_lr);
  std::map<std::string, torch::Tensor> state;
  for (const auto& [name, t] : ours.state_tensors()) state[name] = t;
  for (const auto& [name, p] : params) {
    const torch::Tensor want = torch::tensor(reference.params.at(name), torch::kFloat64).view(p.sizes());
    // Under bf16 the fp32 master carries the update; the parameter is its rounding.
    const std::string master = (name.find("proj") != std::string::npos ? "muon_master." : "master.") + name;
    const torch::Tensor got = dtype == torch::kFloat32 ? p.detach().to(torch::kFloat64) : state.at(master).to(torch::kFloat64);
    INFO(name);
    CHECK((got - want).abs().max().item<double>() <= tolerance);
    if (dtype != torch::kFloat32) CHECK(torch::equal(p.detach(), state.at(master).to(dtype)));
  }
}

}  // namespace

TEST_CASE("Muon.matches_torch_optim_muon_and_adamw_for_several_steps") { check_against_torch(torch::kFloat32, 2e-6); }

TEST_CASE("Muon.bf16_parameters_keep_fp32_masters_that_match_torch") { check_against_torch(torch::kBFloat16, 2e-6); }

TEST_CASE("Muon.state_restores_exactly") {
  const train::MuonOptions mo;
  auto a = make_parameters(torch::kFloat32, 3), b = make_parameters(torch::kFloat32, 3);
  train::Muon first(a, mo, {}, 1e-3);
  torch::manual_seed(4);
  std::vector<std::vector<torch::Tensor>> grads(5);
  for (auto& step : grads)
    for (const auto& [name, p] : a) step.push_back(torch::randn(p.sizes()));
  auto run = [&](std::vector<std::pair<std::string, torch::Tensor>>& params, train::Muon& muon, int from, int to) {
    for (int s = from; s < to; ++s) {
      for (size_t i = 0; i < params.size(); ++i) params[i].second.mutable_grad() = grads[s][i].clone();
      muon.step(1e-3);
    }
  };
  run(a, first, 0, 5);
  // Three steps, state saved; a new optimizer restored from it takes the last two.
  train::Muon second(b, mo, {}, 1e-3);
  run(b, second, 0, 3);
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, t] : second.state_tensors()) saved[name] = t.clone();
  train::Muon third(b, mo, {}, 1e-3);
  third.load_state_tensors(saved, second.steps_taken());
  run(b, third, 3, 5);
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  saved.erase("muon_momentum.layers.0.mlp.down_proj.weight");
  CHECK_THROWS_WITH(third.load_state_tensors(saved, 3), doctest::Contains("missing 'muon_momentum.layers.0.mlp.down_proj.weight'"));
}

TEST_CASE("Muon.embeddings_and_vocabulary_projections_go_to_adamw") {
  const auto m = torch::ones({8, 4});
  CHECK(dflow::train::is_hidden_matrix("layers.0.self_attn.q_proj.weight", m));
  CHECK(dflow::train::is_hidden_matrix("markov_head.gate_proj.weight", m));
  for (const char* name : {"embed_tokens.weight", "lm_head.weight", "markov_head.markov_w1.weight",
                           "markov_head.markov_w2.weight", "confidence_head.proj.weight"}) {
    CAPTURE(name);
    CHECK_FALSE(dflow::train::is_hidden_matrix(name, m));
  }
  CHECK_FALSE(dflow::train::is_hidden_matrix("fc.bias", torch::ones({4})));
}

TEST_CASE("Muon.a_model_without_hidden_matrices_is_refused") {
  std::vector<std::pair<std::string, torch::Tensor>> params{{"norm.weight", torch::ones({4}).set_requires_grad(true)},
                                                            {"embed_tokens.weight", torch::ones({5, 4}).set_requires_grad(true)}};
  CHECK_THROWS_WITH(train::Muon(params, {}, {}, 1e-3), doctest::Contains("Muon needs 2-D hidden weights"));
}
