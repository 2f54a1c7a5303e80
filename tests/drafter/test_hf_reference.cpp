// dflow against independent Python code (the venv's transformers): the
// target's features of every layer equal Hugging Face's hidden_states[l + 1]
// (the last layer's is the final norm's output), and speculative decoding
// accepts, prompt by prompt and cycle by cycle, what a DFlash drafting
// reference written on transformers accepts with the exported drafter, on a
// drafter whose acceptance is partial.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "target/documents.hpp"
#include "drafter/objective.hpp"
#include "formats/safetensors.hpp"
#include "drafter/speculative.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::drafter;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;

namespace {

// "1,2,3;4,5" for the Python scripts' argument.
std::string rows_argument(const std::vector<std::vector<int64_t>>& rows) {
  std::ostringstream out;
  out << "'";
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i) out << (i ? "," : "") << rows[r][i];
    if (r + 1 < rows.size()) out << ";";
  }
  out << "'";
  return out.str();
}

::dflow::testing::Outcome run_python(const std::string& script, const std::string& arguments) {
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  return ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() + "/tests/" + script +
                                         " " + arguments,
                                     180);
}

std::vector<std::vector<int64_t>> random_rows(int64_t count, int64_t length, int64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < count; ++r) {
    const torch::Tensor ids = torch::randint(0, 510, {length}, torch::kInt64);
    rows.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  }
  return rows;
}

}  // namespace

TEST_CASE("Model.HFReference.FeaturesOfEveryLayerEqualTransformersHiddenStates") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  const int64_t layers = target.num_layers(), length = 11;
  const auto rows = random_rows(2, length, 4);
  ScratchDir scratch("hf-hidden-states");
  const auto out_path = scratch.path() / "hidden_states.safetensors";
  const auto o = run_python("target/hf_hidden_states.py", tiny_target_dir().string() + " " + out_path.string() + " " +
                                                       rows_argument(rows));
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const dflow::formats::SafetensorsFile reference(out_path);

  std::vector<int64_t> every_layer;
  for (int64_t l = 0; l < layers; ++l) every_layer.push_back(l);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    const torch::Tensor ids = torch::tensor(rows[r], torch::kInt64).unsqueeze(0);
    auto expected = [&](int64_t layer) {  // HF's hidden_states[layer + 1]: the output of decoder layer `layer`
      return reference.tensor("row" + std::to_string(r) + ".hidden_states." + std::to_string(layer + 1));
    };
    // Every path that produces features: a full forward (training, replay),
    // the KV cache (speculative decoding in eval), packed rows (training).
    const dflow::target::TargetOutput full = target.forward(ids, every_layer, /*want_logits=*/true);
    dflow::target::KVCache cache = target.new_cache(1, length);
    const dflow::target::TargetOutput prefill = target.forward_cached(cache, ids.narrow(1, 0, 6), every_layer, false);
    const dflow::target::TargetOutput rest =
        target.forward_cached(cache, ids.narrow(1, 6, length - 6), every_layer, false);
    dflow::target::PackedDocuments one_document{torch::arange(length, torch::kInt64).unsqueeze(0),
                                 torch::zeros({1, length}, torch::kInt64)};
    const torch::Tensor packed = target.context_features(ids, one_document, every_layer);  // [1, S, L*H]
    const int64_t hidden = target.config().hidden_size;
    for (int64_t layer = 0; layer < layers; ++layer) {
      CAPTURE(layer);
      const auto l = static_cast<size_t>(layer);
      CHECK(torch::allclose(full.hidden_states[l][0], expected(layer), 1e-4, 1e-4));
      CHECK(torch::allclose(torch::cat({prefill.hidden_states[l], rest.hidden_states[l]}, 1)[0], expected(layer), 1e-4,
                            1e-4));
      CHECK(torch::allclose(packed[0].narrow(1, layer * hidden, hidden), expected(layer), 1e-4, 1e-4));
    }
    CHECK(torch::allclose(full.logits[0], reference.tensor("row" + std::to_string(r) + ".logits"), 1e-4, 1e-4));
  }
}

TEST_CASE("Model.HFReference.SpeculativeAcceptanceEqualsADFlashReferenceOnTransformers") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.target_layer_ids = {1, 2, 3};  // a 4-layer target's last layer included (its final norm's output)
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 17);
  REQUIRE(drafter->spec().target_layer_ids.back() == target.num_layers() - 1);

  // A briefly trained drafter: some drafts accepted, not whole blocks, so the
  // features decide how far each cycle gets.
  const int64_t samples = 8, prompt_length = 8, response_length = 24, length = prompt_length + response_length;
  const auto prompts = random_rows(samples, prompt_length, 1);
  torch::Tensor input_ids = torch::zeros({samples, length}, torch::kInt64);
  for (int64_t i = 0; i < samples; ++i) {
    const auto& prompt = prompts[static_cast<size_t>(i)];
    input_ids[i].narrow(0, 0, prompt_length).copy_(torch::tensor(prompt));
    input_ids[i].narrow(0, prompt_length, response_length)
        .copy_(torch::tensor(target.generate(prompt, response_length, 0.0, 0, {})));
  }
  torch::Tensor loss_mask = torch::zeros({samples, length}, torch::kInt64);
  loss_mask.narrow(1, prompt_length, response_length).fill_(1);
  const torch::Tensor lengths = torch::full({samples}, length, torch::kInt64);
  const torch::Tensor features = target.context_features(input_ids, drafter->spec().target_layer_ids);
  torch::optim::AdamW optimizer(drafter->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  ObjectiveOptions objective;
  objective.loss_decay_gamma = 2.0;
  for (int64_t step = 0; step < 40; ++step) {
    AnchorSamplingOptions sampling;
    sampling.anchors_per_sequence = 16;
    sampling.batch_index = step;
    optimizer.zero_grad();
    dflash_loss(*drafter, target, features, input_ids, loss_mask, lengths, sample_anchors(loss_mask, lengths, sampling),
                objective)
        .loss.backward();
    optimizer.step();
  }
  ScratchDir scratch("dflash-reference");
  save_pretrained(*drafter, scratch.path() / "drafter");

  const int64_t max_new_tokens = 24;
  const auto o = run_python("drafter/dflash_reference.py", tiny_target_dir().string() + " " +
                                                       (scratch.path() / "drafter").string() + " " +
                                                       std::to_string(max_new_tokens) + " " + rows_argument(prompts));
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const size_t line = o.output.find("REFERENCE ");
  REQUIRE(line != std::string::npos);
  const size_t begin = line + std::string("REFERENCE ").size();
  const auto reference = nlohmann::json::parse(o.output.substr(begin, o.output.find('\n', begin) - begin));
  int64_t cycles = 0, partial = 0, accepted_tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    CAPTURE(p);
    const SpeculativeResult dflow = speculative_generate(*drafter, target, prompts[p], max_new_tokens, {});
    CHECK(dflow.acceptance_lengths == reference["acceptance_lengths"][p].get<std::vector<int64_t>>());
    CHECK(dflow.tokens == reference["tokens"][p].get<std::vector<int64_t>>());
    for (const int64_t tau : dflow.acceptance_lengths) {
      cycles += 1;
      partial += tau > 1 && tau < options.block_size;
      accepted_tokens += tau;
    }
  }
  // The comparison means something only where drafts are accepted in part.
  const double mean_tau = static_cast<double>(accepted_tokens) / static_cast<double>(cycles);
  CAPTURE(mean_tau);
  CHECK(partial >= 4);
  CHECK(mean_tau > 1.3);
  CHECK(mean_tau < options.block_size - 0.3);
}
