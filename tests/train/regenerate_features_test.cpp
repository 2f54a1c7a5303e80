// `regenerate --features`: the hidden states kept from the generation's own
// forward passes (prefill, KV-cached decode steps, one step for the last
// token) against a fresh full forward of the finished sequence.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/feature_cache.hpp"
#include "target/model_fixtures.hpp"
#include "train/feature_cache.hpp"
#include "train/regenerate.hpp"
#include "train/regenerate_features.hpp"

namespace {

namespace fs = std::filesystem;
using dflow::target::TargetModel;
using dflow::target::testing::ScratchDir;

std::vector<std::vector<int64_t>> read_lines(const fs::path& jsonl, std::vector<int64_t>* prompt_lengths = nullptr) {
  std::vector<std::vector<int64_t>> lines;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto sample = nlohmann::json::parse(line);
    lines.push_back(sample.at("input_ids").get<std::vector<int64_t>>());
    const auto mask = sample.at("loss_mask").get<std::vector<int>>();
    if (prompt_lengths) prompt_lengths->push_back(std::count(mask.begin(), mask.end(), 0));
  }
  return lines;
}

struct Difference {
  double max_abs = 0;
  double max_relative = 0;         // max_abs / max |reference| of the sample
  double max_relative_prompt = 0;  // the same over the prompt's positions (the prefill's states)
};

// Every line's record read back in float32 against context_features of the
// line's tokens alone; checks the record's tokens hash and count on the way.
// `dir`'s out.jsonl and cache against a full forward; `label` names the case
// in the printed figures.
Difference compare_with_full_forward(const std::string& label, const TargetModel& target, const fs::path& dir,
                                     const std::vector<int64_t>& layer_ids) {
  const fs::path jsonl = dir / "out.jsonl", cache_dir = dir / "cache";
  std::vector<int64_t> prompt_lengths;
  const auto lines = read_lines(jsonl, &prompt_lengths);
  dflow::data::FeatureCacheReader reader(cache_dir);
  CHECK(reader.num_samples() == static_cast<int64_t>(lines.size()));
  const auto& manifest = reader.manifest();
  CHECK(manifest.source == "regenerate");
  CHECK(manifest.layer_ids == layer_ids);
  Difference worst;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& ids = lines[i];
    const auto record = reader.get(static_cast<int64_t>(i));
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    CHECK(record.tokens_hash == dflow::data::tokens_hash(ids32));
    REQUIRE(record.rows == static_cast<int64_t>(ids.size()));
    auto captured = torch::empty({record.rows, manifest.width()}, torch::kFloat32);
    dflow::train::decode_feature_rows(record.bytes, record.rows, manifest.dtype, captured);
    const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);  // [1, L]
    const auto reference = target.context_features(input, layer_ids)[0].to(torch::kFloat32);
    const auto difference = (captured - reference).abs();
    const double scale = reference.abs().max().item<double>();
    const double max_abs = difference.max().item<double>();
    worst.max_abs = std::max(worst.max_abs, max_abs);
    worst.max_relative = std::max(worst.max_relative, max_abs / scale);
    worst.max_relative_prompt = std::max(
        worst.max_relative_prompt, difference.narrow(0, 0, prompt_lengths[i]).max().item<double>() / scale);
  }
  MESSAGE(label, ": max abs ", worst.max_abs, ", max relative ", worst.max_relative, ", prompt positions ",
          worst.max_relative_prompt);
  return worst;
}

// Prompts of equal and of different lengths (batched greedy groups of 3, 2 and 1).
std::vector<std::vector<int64_t>> prompts() {
  return {{5, 17, 99, 3, 42}, {11, 12, 13, 200, 300}, {7, 8, 9, 10, 11},
          {1, 2, 3, 4, 5, 6, 7, 8, 9}, {300, 301, 302, 303, 304, 305, 306, 307, 308}, {42, 43, 44}};
}

dflow::train::RegenerateOptions options_for(const TargetModel& target, const fs::path& cache_dir,
                                            dflow::data::FeatureDtype dtype) {
  dflow::train::RegenerateOptions options;
  options.max_new_tokens = 12;
  options.features.dir = cache_dir;
  options.features.target_dir = dflow::target::testing::tiny_target_dir();
  options.features.dtype = dtype;
  // 3 of the 4 layers, the last (the final norm's output) among them.
  options.features.layer_ids = dflow::train::regenerate_feature_layers(target.config(), 3, {});
  return options;
}

}  // namespace

TEST_CASE("Regenerate.features.choose_layers_as_training_does") {
  const auto target = TargetModel::load(dflow::target::testing::tiny_target_dir());
  CHECK(dflow::train::regenerate_feature_layers(target.config(), 3, {}) == std::vector<int64_t>{0, 1, 2});
  CHECK(dflow::train::regenerate_feature_layers(target.config(), 0, {}) == std::vector<int64_t>{2});  // 1 draft layer
  CHECK(dflow::train::regenerate_feature_layers(target.config(), 3, {0, 3}) == std::vector<int64_t>{0, 3});
}

TEST_CASE("Regenerate.features.float32_greedy_batches_match_a_full_forward") {
  ScratchDir dir("regen-features-f32");
  const auto all = prompts();
  // The tiny target with the 4th token of the first greedy answer as its
  // eos: that row stops early while its batch keeps decoding (its extra
  // positions must be dropped).
  const auto target_dir = dir.path() / "target";
  fs::copy(dflow::target::testing::tiny_target_dir(), target_dir);
  {
    const auto probe = TargetModel::load(target_dir).generate(all[0], 4, 0.0, 0, {});
    auto config = nlohmann::json::parse(std::ifstream(target_dir / "config.json"));
    config["eos_token_id"] = probe[3];
    std::ofstream(target_dir / "config.json", std::ios::trunc) << config.dump(2);
  }
  const auto target = TargetModel::load(target_dir);
  auto options = options_for(target, dir.path() / "cache", dflow::data::FeatureDtype::float32);
  options.features.target_dir = target_dir;
  const int64_t written = dflow::train::regenerate_jsonl(target, all, options, dir.path() / "out.jsonl");
  CHECK(written == static_cast<int64_t>(all.size()));
  const auto lines = read_lines(dir.path() / "out.jsonl");
  REQUIRE(lines.size() == all.size());
  CHECK(lines[0].size() <= all[0].size() + 4);  // stopped at the added eos
  CHECK(lines[1].size() == all[1].size() + 12);  // while its batch went on to the end
  const auto diff = compare_with_full_forward("float32 greedy", target, dir.path(), options.features.layer_ids);
  // Not bit-equal, even on the prompt's positions: the prefill multiplies
  // [P, H] matrices, the full forward [L, H] ones, and the CPU GEMM splits
  // its sums by shape; the decode steps ([1, H] rows, attention over the
  // cache) add a little. Measured (x86 CPU): max |diff| / max |feature|
  // 1.0e-6 (prompt positions 6.3e-7), about 10 float32 ulps of the largest
  // feature; max abs 7.2e-6 at magnitudes up to ~7.
  CHECK(diff.max_relative <= 5e-6);
}

TEST_CASE("Regenerate.features.float32_sampled_matches_a_full_forward") {
  const auto target = TargetModel::load(dflow::target::testing::tiny_target_dir());
  ScratchDir dir("regen-features-sampled");
  auto options = options_for(target, dir.path() / "cache", dflow::data::FeatureDtype::float32);
  options.temperature = 0.9;
  options.seed = 5;
  const auto all = prompts();
  const std::vector<std::vector<int64_t>> some(all.begin(), all.begin() + 3);
  REQUIRE(dflow::train::regenerate_jsonl(target, some, options, dir.path() / "out.jsonl") == 3);
  // The tokens are exactly those of generate() with the same seed.
  const auto lines = read_lines(dir.path() / "out.jsonl");
  const auto again = target.generate(some[1], options.max_new_tokens, options.temperature,
                                     dflow::data::hash_combine(options.seed, 1), target.config().eos_token_ids);
  CHECK(std::vector<int64_t>(lines[1].begin() + static_cast<int64_t>(some[1].size()), lines[1].end()) == again);
  const auto diff = compare_with_full_forward("float32 sampled", target, dir.path(), options.features.layer_ids);
  // As greedy's. Measured: 1.1e-6 with 1 thread, 1.5e-6 with 2 (the GEMM
  // splits by thread count too; prompt positions up to 5.0e-7), max abs 1.0e-5.
  CHECK(diff.max_relative <= 5e-6);
}

TEST_CASE("Regenerate.features.bfloat16_target_within_tolerance") {
  const auto target = TargetModel::load(dflow::target::testing::tiny_target_dir(), torch::kCPU, torch::kBFloat16);
  ScratchDir dir("regen-features-bf16");
  auto options = options_for(target, dir.path() / "cache", dflow::data::FeatureDtype::bfloat16);
  REQUIRE(dflow::train::regenerate_jsonl(target, prompts(), options, dir.path() / "out.jsonl") == 6);
  const auto diff = compare_with_full_forward("bfloat16 greedy", target, dir.path(), options.features.layer_ids);
  // bfloat16 rounds every layer's output to 8 bits of mantissa (relative
  // step 2^-8 = 0.0039), so a different summation order moves a feature by
  // whole bf16 steps. Measured: 0.0103 (prompt positions 0.0096), max abs
  // 0.078 at magnitudes up to ~7.6: under 3 bf16 steps of the largest
  // feature. Bound: 0.03 (about 8 steps).
  CHECK(diff.max_relative <= 0.03);
}

TEST_CASE("Regenerate.features.a_rerun_keeps_identical_records_and_refuses_others") {
  const auto target = TargetModel::load(dflow::target::testing::tiny_target_dir());
  ScratchDir dir("regen-features-rerun");
  auto options = options_for(target, dir.path() / "cache", dflow::data::FeatureDtype::bfloat16);
  const auto all = prompts();
  REQUIRE(dflow::train::regenerate_jsonl(target, all, options, dir.path() / "out.jsonl") == 6);
  // Greedy again: the same lines, the records already there are kept.
  REQUIRE(dflow::train::regenerate_jsonl(target, all, options, dir.path() / "out.jsonl") == 6);
  CHECK(dflow::data::FeatureCacheReader(dir.path() / "cache").num_samples() == 6);
  // Other prompts for the same ids: refused, the first output left as it was.
  auto reversed = all;
  std::reverse(reversed.begin(), reversed.end());
  CHECK_THROWS_WITH_AS(dflow::train::regenerate_jsonl(target, reversed, options, dir.path() / "out.jsonl"),
                       doctest::Contains("for other tokens"), dflow::data::DataError);
  CHECK(read_lines(dir.path() / "out.jsonl").size() == 6);
  // Another layer choice: the manifest refuses it.
  options.features.layer_ids = {0, 1};
  CHECK_THROWS(dflow::train::regenerate_jsonl(target, all, options, dir.path() / "out.jsonl"));
}
