// `dflow regenerate --features DIR` as a user runs it: the data and its
// features from one pass of the target, one cache record per output line.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../text/text_fixtures.hpp"
#include "data/feature_cache.hpp"
#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;
using ::dflow::testing::Outcome;

Outcome run_dflow(const std::string& args) {
  return ::dflow::testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

fs::path fresh(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflow-regen-features-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::vector<int32_t>> output_ids(const fs::path& jsonl) {
  std::vector<std::vector<int32_t>> lines;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::json::parse(line).at("input_ids").get<std::vector<int32_t>>());
  return lines;
}

// One record per line, sample id = line index, tied to the line's tokens.
void check_one_record_per_line(const fs::path& cache, const fs::path& jsonl) {
  const auto lines = output_ids(jsonl);
  dflow::data::FeatureCacheReader reader(cache);
  CHECK(reader.num_samples() == static_cast<int64_t>(lines.size()));
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto record = reader.get(static_cast<int64_t>(i));  // verifies the checksum
    CHECK(record.rows == static_cast<int64_t>(lines[i].size()));
    CHECK(record.tokens_hash == dflow::data::tokens_hash(lines[i]));
  }
}

}  // namespace

TEST_CASE("Cli.Regenerate.features_one_record_per_output_line") {
  const auto dir = fresh("prompts");
  auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --vocab 512 --layers 4");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  std::ofstream(dir / "prompts.jsonl") << "{\"prompt_ids\": [5, 17, 99, 3, 42]}\n"
                                       << "{\"prompt_ids\": [11, 12, 13, 200, 300]}\n"
                                       << "{\"prompt_ids\": [1, 2, 3]}\n";
  const std::string command = "regenerate --target " + (dir / "target").string() + " --prompts " +
                              (dir / "prompts.jsonl").string() + " --max-new-tokens 6 --out " +
                              (dir / "out.jsonl").string() + " --features " + (dir / "cache").string() +
                              " --num-target-features 2";
  o = run_dflow(command);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("features: at most") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("features: 3 samples") != std::string::npos, o.output);
  check_one_record_per_line(dir / "cache", dir / "out.jsonl");
  const auto manifest = dflow::data::read_manifest(dir / "cache");
  // The DFlash formula gives 1, 1 for 2 of 4 layers; training makes them distinct.
  CHECK(manifest.layer_ids == std::vector<int64_t>{1, 2});
  CHECK(manifest.dtype == dflow::data::FeatureDtype::bfloat16);
  CHECK(manifest.source == "regenerate");

  // Another layer choice for the same cache: refused, naming the layers.
  o = run_dflow(command + " --target-layer-ids 0,2");
  CHECK(o.exit_code != 0);
  CHECK_MESSAGE(o.output.find("layer") != std::string::npos, o.output);
  // The target in bfloat16, as a bfloat16 training run computes: the
  // manifest says so (what that run checks).
  const std::string bf16_command = "regenerate --target " + (dir / "target").string() + " --prompts " +
                                   (dir / "prompts.jsonl").string() + " --max-new-tokens 6 --out " +
                                   (dir / "out-bf16.jsonl").string() + " --features " + (dir / "cache-bf16").string() +
                                   " --num-target-features 2 --dtype bfloat16";
  o = run_dflow(bf16_command);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(dflow::data::read_manifest(dir / "cache-bf16").target_dtype == "bfloat16");
  CHECK(dflow::data::read_manifest(dir / "cache").target_dtype == "float32");
  o = run_dflow(command + " --device tpu9");
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("--device tpu9") != std::string::npos, o.output);
  // The options that shape features need --features.
  o = run_dflow("regenerate --target t --prompts p --out o --features-dtype float32");
  CHECK(o.exit_code == 2);
  fs::remove_all(dir);
}

TEST_CASE("Cli.Regenerate.chats_features_follow_a_rerun") {
  const auto dir = fresh("chats");
  auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --vocab 512 --layers 2");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  dflow::text::test::write_json(dir / "target" / "tokenizer.json", dflow::text::test::tiny_tokenizer_json());
  std::ofstream(dir / "chats.jsonl")
      << R"({"messages": [{"role": "user", "content": "hello"}]})" << "\n"
      << R"({"messages": [{"role": "system", "content": "no user here"}]})" << "\n"
      << R"({"messages": [{"role": "user", "content": "hello world"}]})" << "\n";
  const std::string base = "regenerate --target " + (dir / "target").string() + " --chats " +
                           (dir / "chats.jsonl").string() + " --chat-template chatml --max-new-tokens 5 --out " +
                           (dir / "out.jsonl").string() + " --features-dtype float32 --features ";
  o = run_dflow(base + (dir / "cache").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  check_one_record_per_line(dir / "cache", dir / "out.jsonl");
  const auto lines = output_ids(dir / "out.jsonl");
  REQUIRE(lines.size() == 2);

  // A crash in the middle of the second line: the rerun writes it again
  // (greedy: the same tokens, so its record is already there) and finds the
  // first line's features in the cache.
  std::string first, second;
  {
    std::ifstream in(dir / "out.jsonl");
    std::getline(in, first);
    std::getline(in, second);
  }
  std::ofstream(dir / "out.jsonl", std::ios::trunc) << first << "\n" << second.substr(0, 10);
  o = run_dflow(base + (dir / "cache").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("of the 1 lines already in") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("0 lacked features") != std::string::npos, o.output);
  check_one_record_per_line(dir / "cache", dir / "out.jsonl");

  // The same rerun into a new cache (as after a kill between writing lines
  // and publishing their features): the earlier line gets its record first,
  // from a forward over the line; the new line's record gets its id.
  std::ofstream(dir / "out.jsonl", std::ios::trunc) << first << "\n";
  o = run_dflow(base + (dir / "cache2").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("1 lacked features") != std::string::npos, o.output);
  check_one_record_per_line(dir / "cache2", dir / "out.jsonl");
  // Its features are the target's at the line's positions: those the
  // generation kept in the first cache, to float32 rounding.
  {
    dflow::data::FeatureCacheReader generated(dir / "cache"), recomputed(dir / "cache2");
    const auto a = generated.get(0), b = recomputed.get(0);
    REQUIRE(a.bytes.size() == b.bytes.size());
    const auto* x = reinterpret_cast<const float*>(a.bytes.data());
    const auto* y = reinterpret_cast<const float*>(b.bytes.data());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.bytes.size() / sizeof(float); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
      scale = std::max(scale, static_cast<double>(std::abs(x[i])));
    }
    CHECK(worst <= 1e-4 * scale);
  }

  // An --out that regenerate did not write (a training JSONL): refused,
  // naming the line, and left as it was.
  const std::string training_line = R"({"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]})";
  std::ofstream(dir / "train.jsonl", std::ios::trunc) << training_line << "\n" << training_line << "\n";
  const auto before = fs::file_size(dir / "train.jsonl");
  o = run_dflow("regenerate --target " + (dir / "target").string() + " --chats " + (dir / "chats.jsonl").string() +
                " --chat-template chatml --max-new-tokens 5 --out " + (dir / "train.jsonl").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("train.jsonl:1: --out holds a line that regenerate --chats did not write") !=
                    std::string::npos,
                o.output);
  CHECK(fs::file_size(dir / "train.jsonl") == before);
  // Its own output with a foreign line after it: refused at that line.
  std::ofstream(dir / "mixed.jsonl", std::ios::trunc) << first << "\n" << training_line << "\n";
  o = run_dflow("regenerate --target " + (dir / "target").string() + " --chats " + (dir / "chats.jsonl").string() +
                " --chat-template chatml --max-new-tokens 5 --out " + (dir / "mixed.jsonl").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("mixed.jsonl:2:") != std::string::npos, o.output);
  fs::remove_all(dir);
}
