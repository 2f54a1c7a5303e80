// `dflow regenerate --features DIR` as a user runs it: the data and its
// features from one pass of the target, one cache record per output line.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <unistd.h>

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
  CHECK_MESSAGE(o.output.find("0 lack features") != std::string::npos, o.output);
  check_one_record_per_line(dir / "cache", dir / "out.jsonl");

  // The same rerun into a new cache: the earlier line's features are not
  // there, which the report says; the new line's record gets its id.
  std::ofstream(dir / "out.jsonl", std::ios::trunc) << first << "\n";
  o = run_dflow(base + (dir / "cache2").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("1 lack features") != std::string::npos, o.output);
  dflow::data::FeatureCacheReader reader(dir / "cache2");
  CHECK(reader.num_samples() == 1);
  CHECK_FALSE(reader.contains(0));
  CHECK(reader.get(1).tokens_hash == dflow::data::tokens_hash(lines[1]));
  fs::remove_all(dir);
}
