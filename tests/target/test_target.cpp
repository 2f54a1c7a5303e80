// The frozen target: loading, feature layer ids, KV-cached decoding, right
// padding, generation.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include "formats/safetensors.hpp"
#include "target/echo_check.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::target;
using dflow::target::testing::EchoPermutation;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;

TEST_CASE("Model.Target.FeatureLayerIdsFollowThePublicFormula") {
  CHECK(feature_layer_ids(36, 5) == std::vector<int64_t>{1, 9, 17, 25, 33});
  CHECK(feature_layer_ids(32, 5) == std::vector<int64_t>{1, 8, 15, 22, 29});
  CHECK(feature_layer_ids(36, 1) == std::vector<int64_t>{18});
  CHECK(feature_layer_ids(28, 3) == std::vector<int64_t>{1, 13, 25});
  // 1 + 1 * 3 / 2 = 2.5 rounds half to even, like Python's round().
  CHECK(feature_layer_ids(7, 3) == std::vector<int64_t>{1, 2, 4});
}

TEST_CASE("Model.Target.DefaultFeatureLayersAreDistinct") {
  CHECK(feature_layer_ids(4, 3) == std::vector<int64_t>{1, 1, 1});  // the formula degenerates ...
  // ... the default does not, and stays below the last layer (which a
  // speculators server never gives a drafter) while there is room.
  CHECK(distinct_feature_layer_ids(4, 3) == std::vector<int64_t>{0, 1, 2});
  CHECK(distinct_feature_layer_ids(6, 5) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(distinct_feature_layer_ids(5, 3) == std::vector<int64_t>{1, 2, 3});
  CHECK(distinct_feature_layer_ids(2, 1) == std::vector<int64_t>{0});
  // Every layer a feature: the last one too.
  CHECK(distinct_feature_layer_ids(3, 3) == std::vector<int64_t>{0, 1, 2});
  CHECK(distinct_feature_layer_ids(5, 5) == std::vector<int64_t>{0, 1, 2, 3, 4});
  // Where the formula's layers are distinct they are kept.
  CHECK(distinct_feature_layer_ids(36, 5) == feature_layer_ids(36, 5));
  CHECK(distinct_feature_layer_ids(7, 3) == feature_layer_ids(7, 3));
  CHECK(distinct_feature_layer_ids(4, 1) == std::vector<int64_t>{2});
  // More features than layers: a repeat is unavoidable, the formula stands.
  CHECK(distinct_feature_layer_ids(2, 3) == feature_layer_ids(2, 3));
}

TEST_CASE("Model.Target.LoadsTinyHFCheckpoint") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
  CHECK(target.num_layers() == 4);
  CHECK(target.config().family == ModelFamily::Qwen3);
  CHECK(target.config().mask_token_id == 511);
  CHECK(target.embedding_weight().sizes() == torch::IntArrayRef({512, 64}));
  const dflow::formats::TensorMap raw = dflow::formats::load_checkpoint_dir(tiny_target_dir());
  CHECK(torch::equal(target.lm_head_weight(), raw.at("lm_head.weight")));

  torch::manual_seed(3);  // the same ids whichever tests ran before
  const torch::Tensor ids = torch::randint(0, 511, {2, 7}, torch::kInt64);
  const TargetOutput out = target.forward(ids, {0, 3, 1}, /*want_logits=*/true);
  REQUIRE(out.hidden_states.size() == 3);
  CHECK(out.hidden_states[0].sizes() == torch::IntArrayRef({2, 7, 64}));
  CHECK(out.logits.sizes() == torch::IntArrayRef({2, 7, 512}));
  const torch::Tensor features = target.context_features(ids, {0, 3, 1});
  CHECK(features.sizes() == torch::IntArrayRef({2, 7, 192}));
  CHECK(torch::equal(features.narrow(2, 64, 64), out.hidden_states[1]));
  // Layer 3 is the last: its feature is the final norm's output (HF's hidden_states[L]), the LM head's input.
  CHECK(torch::allclose(target.lm_head(out.hidden_states[1]), out.logits, 1e-5, 1e-5));

  const TargetModel bf16 = TargetModel::load(tiny_target_dir(), torch::kCPU, torch::kBFloat16);
  const torch::Tensor bf16_logits = bf16.forward(ids, {}, true).logits.to(torch::kFloat32);
  // bf16 keeps 8 significant bits: after 4 layers and the LM head its
  // logits are off by a few percent of their scale (5% at most over the
  // draws tried), wherever a logit itself is small. Bounded by the scale,
  // not element by element.
  const double scale = out.logits.abs().max().item<double>();
  CHECK((bf16_logits - out.logits).abs().max().item<double>() <= 0.1 * scale);
}

TEST_CASE("Model.Target.KVCacheMatchesFullForward") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
  torch::manual_seed(11);
  const torch::Tensor ids = torch::randint(0, 511, {2, 11}, torch::kInt64);
  const TargetOutput full = target.forward(ids, {2}, /*want_logits=*/true);

  KVCache cache = target.new_cache(2, 16);
  std::vector<torch::Tensor> logits, hidden;
  int64_t position = 0;
  for (const int64_t step : {5, 1, 3, 1, 1}) {  // prefill, then one or several tokens per call
    const TargetOutput part = target.forward_cached(cache, ids.narrow(1, position, step), {2}, true);
    logits.push_back(part.logits);
    hidden.push_back(part.hidden_states[0]);
    position += step;
  }
  CHECK(cache.length() == 11);
  CHECK(torch::allclose(torch::cat(logits, 1), full.logits, 1e-4, 1e-4));
  CHECK(torch::allclose(torch::cat(hidden, 1), full.hidden_states[0], 1e-4, 1e-4));

  // Rolling back (rejected speculative tokens) and re-feeding gives the same again.
  cache.truncate(7);
  const TargetOutput again = target.forward_cached(cache, ids.narrow(1, 7, 4), {}, true);
  CHECK(torch::allclose(again.logits, full.logits.narrow(1, 7, 4), 1e-4, 1e-4));
  CHECK_THROWS_AS(target.forward_cached(cache, ids, {}, true), std::out_of_range);  // over capacity
}

TEST_CASE("Model.Target.RightPaddingLeavesRealPositionsUnchanged") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
  torch::manual_seed(5);
  const torch::Tensor real = torch::randint(0, 511, {1, 6}, torch::kInt64);
  const torch::Tensor padded_a = torch::cat({real, torch::zeros({1, 4}, torch::kInt64)}, 1);
  const torch::Tensor padded_b = torch::cat({real, torch::randint(0, 511, {1, 4}, torch::kInt64)}, 1);
  const torch::Tensor batch = torch::cat({padded_a, padded_b}, 0);  // [2, 10]

  const torch::Tensor alone = target.context_features(real, {1, 3});
  const torch::Tensor in_batch = target.context_features(batch, {1, 3});
  CHECK(torch::allclose(in_batch.narrow(1, 0, 6)[0], alone[0], 1e-5, 1e-5));
  CHECK(torch::allclose(in_batch.narrow(1, 0, 6)[1], alone[0], 1e-5, 1e-5));
}

TEST_CASE("Model.Target.GreedyGenerationIsDeterministicAndVaried") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
  const std::vector<int64_t> prompt = {3, 17, 42, 99, 5};
  const std::vector<int64_t> greedy = target.generate(prompt, 48, 0.0, 1, {});
  REQUIRE(greedy.size() == 48);
  CHECK(target.generate(prompt, 48, 0.0, 2, {}) == greedy);  // seed is irrelevant when greedy

  // Greedy equals the argmax of a full forward at every step.
  std::vector<int64_t> sequence = prompt;
  sequence.insert(sequence.end(), greedy.begin(), greedy.end());
  const torch::Tensor logits = target.forward(torch::tensor(sequence).unsqueeze(0), {}, true).logits[0];
  const torch::Tensor argmax = logits.narrow(0, prompt.size() - 1, greedy.size()).argmax(-1);
  CHECK(torch::equal(argmax, torch::tensor(greedy)));

  // The tiny target is meant to produce learnable but non-trivial text.
  const std::set<int64_t> distinct(greedy.begin(), greedy.end());
  CHECK(distinct.size() >= 8);

  const auto sampled = target.generate(prompt, 32, 1.0, 123, {});
  CHECK(target.generate(prompt, 32, 1.0, 123, {}) == sampled);
  CHECK(target.generate(prompt, 32, 1.0, 124, {}) != sampled);

  // Stops right after an eos token.
  const auto stopped = target.generate(prompt, 48, 0.0, 1, {greedy[3]});
  CHECK(stopped.size() <= 4);
  CHECK(stopped.back() == greedy[3]);
}

TEST_CASE("Model.Target.RefusesCheckpointsThatDisagreeWithConfig") {
  ScratchDir dir("target-mismatch");
  for (const auto& item : std::filesystem::directory_iterator(tiny_target_dir())) {
    std::filesystem::copy(item.path(), dir.path() / item.path().filename());
  }
  auto config = read_json_file(dir.path() / "config.json");
  config["intermediate_size"] = 96;
  std::ofstream(dir.path() / "config.json") << config.dump();
  CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("mlp.gate_proj.weight' has shape"),
                       std::runtime_error);
}

TEST_CASE("Model.Target.Qwen2AndLlamaLayouts") {
  torch::set_num_threads(1);
  ScratchDir dir("target-families");
  const dflow::formats::TensorMap qwen3 = dflow::formats::load_checkpoint_dir(tiny_target_dir());
  const auto qwen3_config = read_json_file(tiny_target_dir() / "config.json");
  torch::manual_seed(8);
  const torch::Tensor ids = torch::randint(0, 500, {1, 9}, torch::kInt64);
  for (const std::string family : {"qwen2", "llama"}) {
    CAPTURE(family);
    const auto family_dir = dir.path() / family;
    std::filesystem::create_directories(family_dir);
    // Qwen2: q/k/v biases, no q/k norms. Llama: no norms, tied embeddings (no lm_head tensor).
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& [name, tensor] : qwen3) {
      if (name.find("_norm.weight") != std::string::npos && name.find("self_attn") != std::string::npos) continue;
      if (family == "llama" && name == "lm_head.weight") continue;
      tensors.emplace_back(name, tensor);
      const bool qkv = name.find("q_proj.weight") != std::string::npos || name.find("k_proj.weight") != std::string::npos ||
                       name.find("v_proj.weight") != std::string::npos;
      if (family == "qwen2" && qkv) tensors.emplace_back(name.substr(0, name.size() - 6) + "bias", torch::randn({tensor.size(0)}));
    }
    dflow::formats::write_safetensors(family_dir / "model.safetensors", tensors);
    auto config = qwen3_config;
    config["model_type"] = family;
    config["architectures"] = {family == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    config["tie_word_embeddings"] = family == "llama";
    std::ofstream(family_dir / "config.json") << config.dump();

    const TargetModel target = TargetModel::load(family_dir);
    CHECK(target.config().qk_norm == false);
    CHECK(target.config().attention_bias == (family == "qwen2"));
    if (family == "llama") CHECK(torch::equal(target.lm_head_weight(), target.embedding_weight()));
    const torch::Tensor full = target.forward(ids, {}, true).logits;
    KVCache cache = target.new_cache(1, 9);
    const torch::Tensor first = target.forward_cached(cache, ids.narrow(1, 0, 6), {}, true).logits;
    const torch::Tensor rest = target.forward_cached(cache, ids.narrow(1, 6, 3), {}, true).logits;
    CHECK(torch::allclose(torch::cat({first, rest}, 1), full, 1e-4, 1e-4));
  }
  // Qwen2 without its q/k/v biases is refused, naming the tensor.
  dflow::formats::write_safetensors(dir.path() / "qwen2" / "model.safetensors",
                    std::vector<std::pair<std::string, torch::Tensor>>(qwen3.begin(), qwen3.end()));
  CHECK_THROWS_WITH_AS(TargetModel::load(dir.path() / "qwen2"), doctest::Contains("q_proj.bias"), std::runtime_error);
}

TEST_CASE("Model.TinyTarget.EchoTargetContinuesItsPromptThroughAPermutation") {
  // The demo's target: a real Qwen3 forward whose greedy continuation is
  // token[t] = perm(token[t - 16]), one consistent permutation for every
  // prompt, and whose sampled continuation at temperature 1 mostly agrees.
  torch::set_num_threads(1);
  ScratchDir dir("echo-target");
  TinyTargetOptions options;
  options.out_dir = dir.path();
  options.seed = 3;
  options.pattern = "echo";
  const HFConfig config = make_tiny_target(options);
  CHECK(config.model_type == "qwen3");
  const TargetModel target = TargetModel::load(dir.path());
  const int64_t lag = options.echo_lag, text_vocab = options.vocab_size - 2;
  EchoPermutation perm(lag, text_vocab);
  int64_t checked = 0, agreeing_samples = 0, sampled = 0;
  torch::manual_seed(5);
  for (int64_t p = 0; p < 4; ++p) {
    const torch::Tensor ids = torch::randint(0, text_vocab, {lag + 4 * p}, torch::kInt64);
    const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    const std::vector<int64_t> greedy = target.generate(prompt, 120, 0.0, 0, {});
    const std::vector<int64_t> samples = target.generate(prompt, 120, 1.0, 9, {});
    checked += perm.follow(prompt, greedy);
    for (size_t i = 0; i < samples.size() && i < static_cast<size_t>(lag); ++i, ++sampled)
      agreeing_samples += samples[i] == greedy[i];
  }
  CHECK(checked == 4 * 120);
  perm.check_is_a_permutation();
  CHECK(agreeing_samples >= sampled * 9 / 10);  // low entropy when sampled
}
