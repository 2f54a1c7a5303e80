// What the tests against transformers' own output share: a fixture script
// run once per test process into a scratch directory, its reference.json,
// and the comparisons.
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target/documents.hpp"
#include "target/hf_config.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/model_fixtures.hpp"
#include "test_paths.hpp"
#include "tools/run_command.hpp"

namespace dflow::target::testing {

// Runs tests/target/<script> DIR [arguments] with the venv's Python; fails
// the test, with the script's output, when it does not succeed. The
// reference runs under the same environment as dflow (a ctest entry's
// ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), with attention implementations
// that work under it (eager); the test's output says which kernels each
// side ran, as the script prints its own ("reference kernels: ...").
inline void write_with_python(const std::string& script, const std::filesystem::path& dir,
                              const std::string& arguments = "") {
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                   "/tests/target/" + script + " " + dir.string() +
                                                   (arguments.empty() ? "" : " " + arguments),
                                               600);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const std::string key = "reference kernels: ";
  const auto at = o.output.find(key);
  const std::string theirs = at == std::string::npos ? "not said" : o.output.substr(at + key.size(), o.output.find('\n', at) - at - key.size());
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  MESSAGE(script << ": dflow's kernels: ATen CPU capability " << at::get_cpu_capability()
                 << (isa ? std::string(", oneDNN ISA at most ") + isa : std::string()) << "; the reference's: " << theirs);
}

inline nlohmann::json reference_json(const std::filesystem::path& checkpoint) {
  return read_json_file(checkpoint / "reference.json");
}

inline std::vector<std::vector<int64_t>> id_lists(const nlohmann::json& json) {
  return json.get<std::vector<std::vector<int64_t>>>();
}

inline std::vector<int64_t> every_layer(const TargetModel& target) {
  std::vector<int64_t> ids;
  for (int64_t l = 0; l < target.num_layers(); ++l) ids.push_back(l);
  return ids;
}

inline torch::Tensor ids_tensor(const std::vector<int64_t>& row) {
  return torch::tensor(row, torch::kInt64).unsqueeze(0);
}

// ||a - b|| / ||b|| over the whole state.
inline double relative_error(const torch::Tensor& got, const torch::Tensor& expected) {
  const torch::Tensor e = expected.to(torch::kFloat64);
  return (got.to(torch::kFloat64) - e).norm().item<double>() / e.norm().item<double>();
}

// Every layer's float32 state (the last after the final norm) and the logits
// of each reference row within 1e-4 of transformers' (reference.safetensors
// "float32.row<r>.hidden_states.<l + 1>" and ".logits").
inline void check_float32_states_equal_reference(const std::filesystem::path& dir) {
  const TargetModel target = TargetModel::load(dir);
  const dflow::formats::SafetensorsFile reference(dir / "reference.safetensors");
  const auto rows = id_lists(reference_json(dir)["rows"]);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    const TargetOutput out = target.forward(ids_tensor(rows[r]), every_layer(target), /*want_logits=*/true);
    for (int64_t layer = 0; layer < target.num_layers(); ++layer) {
      CAPTURE(layer);
      const torch::Tensor expected =
          reference.tensor("float32.row" + std::to_string(r) + ".hidden_states." + std::to_string(layer + 1));
      REQUIRE(expected.abs().max().item<double>() > 0.5);  // O(1) activations, not a vacuous comparison
      CHECK(torch::allclose(out.hidden_states[static_cast<size_t>(layer)][0], expected, 1e-4, 1e-4));
    }
    CHECK(torch::allclose(out.logits[0], reference.tensor("float32.row" + std::to_string(r) + ".logits"), 1e-4, 1e-4));
  }
}

// dflow in bfloat16 (the checkpoint converted on load) is no farther from
// transformers' float32 than transformers' own bfloat16 is (a quarter more,
// plus 0.5%), layer by layer: the relative error of each [S, H] state, its
// norm over the reference's. Both are measured on this machine, whose
// kernels decide how bf16 rounds: a fixed bound fits one CPU's, and bf16's
// error grows layer by layer to several percent where a state is sensitive
// (the last layer's norm). Against transformers' bf16 itself dflow is then
// within the sum of the two (the triangle inequality); captured, not
// checked. A lost sink, window, YaRN factor or expert moves a state by
// O(1), beyond the bound in every layer.
inline void check_bfloat16_states_near_transformers(const std::filesystem::path& dir) {
  const TargetModel target = TargetModel::load(dir, torch::kCPU, torch::kBFloat16);
  const dflow::formats::SafetensorsFile reference(dir / "reference.safetensors");
  const auto rows = id_lists(reference_json(dir)["rows"]);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    const TargetOutput out = target.forward(ids_tensor(rows[r]), every_layer(target), false);
    for (int64_t layer = 0; layer < target.num_layers(); ++layer) {
      CAPTURE(layer);
      const torch::Tensor& got = out.hidden_states[static_cast<size_t>(layer)][0];
      CHECK((got.scalar_type() == torch::kBFloat16));
      const std::string key = ".row" + std::to_string(r) + ".hidden_states." + std::to_string(layer + 1);
      const torch::Tensor float32 = reference.tensor("float32" + key), bfloat16 = reference.tensor("bfloat16" + key);
      const double transformers_bf16_error = relative_error(bfloat16, float32);
      const double dflow_bf16_error = relative_error(got, float32);
      const double error_against_transformers_bf16 = relative_error(got, bfloat16);
      CAPTURE(transformers_bf16_error);
      CAPTURE(dflow_bf16_error);
      CAPTURE(error_against_transformers_bf16);
      CHECK(transformers_bf16_error > 1e-4);  // bf16 is not float32: the bound is bf16's rounding
      CHECK(dflow_bf16_error < 1.25 * transformers_bf16_error + 0.005);
    }
  }
}

// dflow's greedy decoding in float32 equals transformers' float64 argmax
// decoding of each reference prompt (reference.json "greedy_float64").
inline void check_greedy_equals_float64_argmax(const std::filesystem::path& dir) {
  const TargetModel target = TargetModel::load(dir);
  const nlohmann::json reference = reference_json(dir);
  const auto prompts = id_lists(reference["prompts"]);
  const auto expected = id_lists(reference["greedy_float64"]);
  for (size_t p = 0; p < prompts.size(); ++p) {
    CAPTURE(p);
    CHECK(target.generate(prompts[p], static_cast<int64_t>(expected[p].size()), 0.0, 0, {}) == expected[p]);
  }
}

// max |got - expected|, in float64.
inline double max_abs_difference(const torch::Tensor& got, const torch::Tensor& expected) {
  return (got.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>();
}

// Another summation order (the GEMM kernels of another shape, the cache's or
// the packing's chunks of the attention) moves a float32 result by about
// float32's rounding of the computation, which this machine's kernels show:
// the float32 forward's distance from the float64 one. Two float32 orders are
// each that far from the exact result, so their distance is at most about
// twice it; kOtherOrders allows twice that again for a largest difference
// drawn from other sums (measured with PyTorch's kernels forced to each ISA:
// at most 1.6 times; docs/reliability.md "Tests on other CPUs"). A wrong
// position, mask or document moves a state by O(1), 10^4 times more.
constexpr double kOtherOrders = 4.0;

// `got` (float32, another order of the same computation) is within
// kOtherOrders of float32's rounding of `full32`, measured against `full64`.
inline void check_within_float32_rounding(const torch::Tensor& got, const torch::Tensor& full32,
                                          const torch::Tensor& full64) {
  const double rounding = max_abs_difference(full32, full64), scale = full64.abs().max().item<double>();
  const double difference = max_abs_difference(got, full32);
  CAPTURE(rounding);
  CAPTURE(difference);
  // float32 follows float64 (no routing decision flips): the bound is rounding, not a mistake.
  REQUIRE(rounding < 1e-4 * scale);
  CHECK(difference <= kOtherOrders * rounding);
}

// The KV cache (calls of `chunks` tokens first, then one token per call) and
// rows a and b packed as two documents of one row give a's and b's
// full-forward states of `layers` and logits within float32's rounding of
// them, measured by `target64` (the same checkpoint in float64).
inline void check_cache_and_packing_equal_full_forward(const TargetModel& target, const TargetModel& target64,
                                                       const std::vector<int64_t>& layers, const torch::Tensor& a,
                                                       const torch::Tensor& b, const std::vector<int64_t>& chunks) {
  const int64_t la = a.size(1), lb = b.size(1);
  const TargetOutput full_a = target.forward(a, layers, true), full_a64 = target64.forward(a, layers, true);
  const TargetOutput full_b = target.forward(b, layers, true), full_b64 = target64.forward(b, layers, true);

  KVCache cache = target.new_cache(1, la);
  std::vector<std::vector<torch::Tensor>> pieces(layers.size());
  std::vector<torch::Tensor> logits;
  const auto step = [&](int64_t start, int64_t count) {
    const TargetOutput out = target.forward_cached(cache, a.narrow(1, start, count), layers, true);
    for (size_t l = 0; l < layers.size(); ++l) pieces[l].push_back(out.hidden_states[l]);
    logits.push_back(out.logits);
  };
  int64_t t = 0;
  for (const int64_t count : chunks) step(t, count), t += count;
  for (; t < la; ++t) step(t, 1);
  for (size_t l = 0; l < layers.size(); ++l) {
    CAPTURE(l);
    check_within_float32_rounding(torch::cat(pieces[l], 1), full_a.hidden_states[l], full_a64.hidden_states[l]);
  }
  check_within_float32_rounding(torch::cat(logits, 1), full_a.logits, full_a64.logits);

  PackedDocuments documents{
      torch::cat({torch::arange(la), torch::arange(lb)}).unsqueeze(0),
      torch::cat({torch::zeros({la}, torch::kInt64), torch::ones({lb}, torch::kInt64)}).unsqueeze(0)};
  const TargetOutput packed = target.forward(torch::cat({a, b}, 1), documents, layers, true);
  for (size_t l = 0; l < layers.size(); ++l) {
    CAPTURE(l);
    check_within_float32_rounding(packed.hidden_states[l].narrow(1, 0, la), full_a.hidden_states[l],
                                  full_a64.hidden_states[l]);
    check_within_float32_rounding(packed.hidden_states[l].narrow(1, la, lb), full_b.hidden_states[l],
                                  full_b64.hidden_states[l]);
  }
  check_within_float32_rounding(packed.logits.narrow(1, la, lb), full_b.logits, full_b64.logits);
}

}  // namespace dflow::target::testing
