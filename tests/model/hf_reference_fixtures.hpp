// What the tests against transformers' own output share: a fixture script
// run once per test process into a scratch directory, its reference.json,
// and the comparisons.
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/documents.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/target.hpp"
#include "model_fixtures.hpp"
#include "test_paths.hpp"
#include "tools/run_command.hpp"

namespace dflow::model::testing {

// Runs tests/model/<script> DIR with the venv's Python; fails the test, with
// the script's output, when it does not succeed.
inline void write_with_python(const std::string& script, const std::filesystem::path& dir) {
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto o = ::dflow::testing::run_command(
      ::dflow::testing::python() + " " + ::dflow::testing::source_dir() + "/tests/model/" + script + " " + dir.string(),
      600);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
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
  const SafetensorsFile reference(dir / "reference.safetensors");
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

// The KV cache (calls of `chunks` tokens first, then one token per call) and
// rows a and b packed as two documents of one row give a's and b's
// full-forward states of `layers` and logits, within rtol 1e-5 and `atol`.
inline void check_cache_and_packing_equal_full_forward(const TargetModel& target, const std::vector<int64_t>& layers,
                                                       const torch::Tensor& a, const torch::Tensor& b,
                                                       const std::vector<int64_t>& chunks, double atol) {
  const int64_t la = a.size(1), lb = b.size(1);
  const TargetOutput full_a = target.forward(a, layers, true);
  const TargetOutput full_b = target.forward(b, layers, true);

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
    CHECK(torch::allclose(torch::cat(pieces[l], 1), full_a.hidden_states[l], 1e-5, atol));
  }
  CHECK(torch::allclose(torch::cat(logits, 1), full_a.logits, 1e-5, atol));

  PackedDocuments documents{
      torch::cat({torch::arange(la), torch::arange(lb)}).unsqueeze(0),
      torch::cat({torch::zeros({la}, torch::kInt64), torch::ones({lb}, torch::kInt64)}).unsqueeze(0)};
  const TargetOutput packed = target.forward(torch::cat({a, b}, 1), documents, layers, true);
  for (size_t l = 0; l < layers.size(); ++l) {
    CAPTURE(l);
    CHECK(torch::allclose(packed.hidden_states[l].narrow(1, 0, la), full_a.hidden_states[l], 1e-5, atol));
    CHECK(torch::allclose(packed.hidden_states[l].narrow(1, la, lb), full_b.hidden_states[l], 1e-5, atol));
  }
  CHECK(torch::allclose(packed.logits.narrow(1, la, lb), full_b.logits, 1e-5, atol));
}

}  // namespace dflow::model::testing
