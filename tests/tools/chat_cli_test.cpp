// The chat-data commands as a user runs them: dflow tokenize, dflow prepare
// from conversations, and training refused for a target with another tokenizer.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;
using ::dflow::testing::Outcome;

Outcome run_dflow(const std::string& args) {
  return ::dflow::testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

fs::path fixture(const std::string& family) {
  const fs::path dir = fs::path(::dflow::testing::text_fixture_dir()) / family;
  REQUIRE_MESSAGE(fs::exists(dir / "tokenizer.json"), "run `ctest -R text` first (fixture step)");
  return dir;
}

fs::path fresh(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflow-chat-cli-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("Cli.Tokenize.prints_ids_and_decodes_them_back") {
  const auto dir = fresh("tokenize");
  std::ofstream(dir / "in.jsonl") << R"({"text": "Hello world<|im_end|>"})" << "\n";
  auto o = run_dflow("tokenize --tokenizer " + fixture("qwen2").string() + " " + (dir / "in.jsonl").string() +
                     " > " + (dir / "ids.jsonl").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  std::ifstream ids_in(dir / "ids.jsonl");
  std::string ids;
  std::getline(ids_in, ids);
  CHECK(ids == R"({"ids":[9707,1879,151645]})");
  o = run_dflow("tokenize --decode --tokenizer " + fixture("qwen2").string() + " " + (dir / "ids.jsonl").string());
  CHECK(o.exit_code == 0);
  CHECK(o.output == "{\"text\":\"Hello world<|im_end|>\"}\n");

  std::ofstream(dir / "bad.jsonl") << "{\"text\": \"ok\"}\n{\"text\": \"caf\xC3(\"}\n";
  o = run_dflow("tokenize --tokenizer " + fixture("qwen2").string() + " " + (dir / "bad.jsonl").string());
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("bad.jsonl:2:") != std::string::npos, o.output);
  fs::remove_all(dir);
}

TEST_CASE("Cli.Prepare.conversations_to_shards_with_rejections_by_line") {
  const auto dir = fresh("prepare");
  std::ofstream(dir / "chats.jsonl")
      << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})" << "\n"
      << R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "bard", "value": "x"}]})" << "\n"
      << R"({"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]})" << "\n";
  auto o = run_dflow("prepare " + (dir / "chats.jsonl").string() + " --tokenizer " + fixture("qwen2").string() +
                     " --chat-template qwen3 --out " + (dir / "shards").string() + " --out-jsonl " +
                     (dir / "samples.jsonl").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("2 samples written") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("chats.jsonl:2: unknown_role: conversations[1].from is 'bard'") != std::string::npos,
                o.output);
  CHECK(fs::exists(dir / "shards" / "tokenizer_fingerprint.json"));
  std::ifstream samples(dir / "samples.jsonl");
  std::string first;
  std::getline(samples, first);
  const auto sample = nlohmann::json::parse(first);
  CHECK(sample["input_ids"].size() == sample["loss_mask"].size());

  o = run_dflow("prepare " + (dir / "chats.jsonl").string() + " --tokenizer " + fixture("qwen2").string() +
                " --chat-template qwen9 --out " + (dir / "other").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("known: qwen3, qwen2.5, chatml, llama3") != std::string::npos, o.output);

  // Training these ids with a target whose tokenizer differs is refused before anything runs.
  o = run_dflow("config --set model.target.path=" + fixture("llama3").string() + " --set data.train=[" +
                (dir / "shards").string() + "] --set run.out_dir=" + (dir / "run").string() + " > " +
                (dir / "run.yaml").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  o = run_dflow("train " + (dir / "run.yaml").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("was tokenized with tokenizer") != std::string::npos, o.output);
  fs::remove_all(dir);
}

#include "../text/text_fixtures.hpp"

TEST_CASE("Cli.Regenerate.conversations_answered_by_the_target_and_a_rerun_continues") {
  const auto dir = fresh("regenerate");
  auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --vocab 512 --layers 1");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  dflow::text::test::write_json(dir / "target" / "tokenizer.json", dflow::text::test::tiny_tokenizer_json());
  std::ofstream(dir / "chats.jsonl")
      << R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "old"}]})" << "\n"
      << R"({"messages": [{"role": "system", "content": "no user here"}]})" << "\n"
      << R"({"conversations": [{"from": "human", "value": "hello world"}, {"from": "gpt", "value": "old"}]})" << "\n";
  const std::string command = "regenerate --target " + (dir / "target").string() + " --chats " +
                              (dir / "chats.jsonl").string() + " --chat-template chatml --max-new-tokens 6 --out " +
                              (dir / "out.jsonl").string();
  o = run_dflow(command);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("ETA") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("line 2: no_user_turn") != std::string::npos, o.output);
  std::vector<std::string> lines;
  {
    std::ifstream in(dir / "out.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  REQUIRE(lines.size() == 2);
  CHECK(nlohmann::json::parse(lines[0])["line"] == 1);
  CHECK(nlohmann::json::parse(lines[1])["line"] == 3);

  // A crash in the middle of the second line: the rerun keeps the first, redoes the second.
  std::ofstream(dir / "out.jsonl", std::ios::trunc) << lines[0] << "\n" << lines[1].substr(0, 10);
  o = run_dflow(command);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("wrote 1 samples") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("1 already there") != std::string::npos, o.output);
  std::ifstream in(dir / "out.jsonl");
  std::string first, second, third;
  std::getline(in, first);
  std::getline(in, second);
  CHECK(first == lines[0]);
  CHECK(second == lines[1]);  // greedy: the same answer again
  CHECK_FALSE(std::getline(in, third));

  o = run_dflow("prepare " + (dir / "out.jsonl").string() + " --out " + (dir / "shards").string() +
                " --vocab-size 512");
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  fs::remove_all(dir);
}

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"

TEST_CASE("Cli.Eval.show_prints_prompts_and_answers_with_accepted_drafts_marked") {
  const auto dir = fresh("show");
  const auto config = dir / "run.yaml";
  std::ofstream(config) << dflow::config::to_yaml(::dflow::testing::small_run_config(dir / "run", {"run.max_steps=2"}));
  auto o = run_dflow("train " + config.string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  dflow::text::test::write_json(dir / "tokenizer.json", dflow::text::test::byte_tokenizer_json(512));
  std::ofstream(dir / "prompts.jsonl") << "{\"prompt_ids\": [104, 105, 33, 300, 7, 8, 9, 10]}\n"
                                       << "{\"prompt_ids\": [11, 12, 13, 200, 300, 4, 5, 6]}\n";
  o = run_dflow("eval --target " + (::dflow::testing::assets_dir() / "target").string() + " --drafter " +
                (dir / "run").string() + " --prompts " + (dir / "prompts.jsonl").string() +
                " --max-new-tokens 24 --show 1 --tokenizer " + (dir / "tokenizer.json").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("--- prompt 0 ---\nhi!") != std::string::npos, o.output);  // ids 104 105 33
  CHECK_MESSAGE(o.output.find("--- answer (accepted drafts in ⟦ ⟧) ---") != std::string::npos, o.output);
  CHECK(o.output.find("--- prompt 1 ---") == std::string::npos);  // --show 1
  fs::remove_all(dir);
}
