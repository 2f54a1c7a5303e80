// gpt-oss conversations as a user prepares them: dflow prepare and dflow
// regenerate --chats with --chat-template harmony, on a gpt-oss-style tiny
// tokenizer (harmony's special tokens, o200k's split regex).
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../text/text_fixtures.hpp"
#include "run_command.hpp"
#include "text/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

::dflow::testing::Outcome run_dflow(const std::string& args) {
  return ::dflow::testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

fs::path fresh(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflow-harmony-cli-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<json> read_lines(const fs::path& path) {
  std::vector<json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

// The text of the ids whose mask is `masked`.
std::string text_where(const dflow::text::Tokenizer& tokenizer, const json& sample, int masked) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < sample["input_ids"].size(); ++i) {
    if (sample["loss_mask"][i] == masked) ids.push_back(sample["input_ids"][i]);
  }
  return tokenizer.decode(ids);
}

}  // namespace

TEST_CASE("Cli.Prepare.gpt_oss_conversations_with_the_harmony_template") {
  const auto dir = fresh("prepare");
  dflow::text::test::write_json(dir / "tokenizer.json", dflow::text::test::harmony_tokenizer_json());
  const auto tokenizer = dflow::text::Tokenizer::load(dir);
  std::ofstream(dir / "chats.jsonl")
      << R"({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hello"},)"
      << R"( {"role": "assistant", "content": "hello world", "thinking": "greet back"}],)"
      << R"( "chat_template_kwargs": {"reasoning_effort": "low"}})" << "\n"
      << R"({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})" << "\n";
  auto o = run_dflow("prepare " + (dir / "chats.jsonl").string() + " --tokenizer " + dir.string() +
                     " --chat-template harmony --out " + (dir / "shards").string() + " --out-jsonl " +
                     (dir / "samples.jsonl").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("2 samples written") != std::string::npos, o.output);
  const auto samples = read_lines(dir / "samples.jsonl");
  REQUIRE(samples.size() == 2);
  CHECK(text_where(*tokenizer, samples[0], 1) ==
        "<|channel|>analysis<|message|>greet back<|end|><|start|>assistant<|channel|>final<|message|>hello world"
        "<|return|>");
  const std::string context = text_where(*tokenizer, samples[0], 0);
  CHECK_MESSAGE(context.find("Reasoning: low\n\n") != std::string::npos, context);
  CHECK_MESSAGE(context.find("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>") != std::string::npos,
                context);
  CHECK(text_where(*tokenizer, samples[1], 1) == "<|channel|>final<|message|>hello<|return|>");

  // The same under its alias; an unknown name lists harmony; a message harmony cannot write is named.
  o = run_dflow("prepare " + (dir / "chats.jsonl").string() + " --tokenizer " + dir.string() +
                " --chat-template gpt-oss --out " + (dir / "alias").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  o = run_dflow("prepare " + (dir / "chats.jsonl").string() + " --tokenizer " + dir.string() +
                " --chat-template harmoni --out " + (dir / "other").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("known: qwen3, qwen2.5, chatml, llama3, harmony, gpt-oss") != std::string::npos,
                o.output);
  std::ofstream(dir / "bad.jsonl")
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})" << "\n"
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"},)"
      << R"( {"role": "assistant", "content": "hello"}]})" << "\n";
  o = run_dflow("prepare " + (dir / "bad.jsonl").string() + " --tokenizer " + dir.string() +
                " --chat-template harmony --out " + (dir / "bad").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("bad.jsonl:2: messages[1].role is 'system' after the first message") !=
                    std::string::npos,
                o.output);
  fs::remove_all(dir);
}

TEST_CASE("Cli.Regenerate.gpt_oss_conversations_answered_after_the_harmony_prompt") {
  const auto dir = fresh("regenerate");
  auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --vocab 512 --layers 1");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  dflow::text::test::write_json(dir / "target" / "tokenizer.json", dflow::text::test::harmony_tokenizer_json());
  const auto tokenizer = dflow::text::Tokenizer::load(dir / "target");
  std::ofstream(dir / "chats.jsonl")
      << R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "old", "thinking": "x"}]})"
      << "\n";
  o = run_dflow("regenerate --target " + (dir / "target").string() + " --chats " + (dir / "chats.jsonl").string() +
                " --chat-template harmony --max-new-tokens 6 --out " + (dir / "out.jsonl").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto lines = read_lines(dir / "out.jsonl");
  REQUIRE(lines.size() == 1);
  const std::string prompt = text_where(*tokenizer, lines[0], 0);
  CHECK_MESSAGE(prompt.starts_with("<|start|>system<|message|>You are ChatGPT"), prompt);
  CHECK_MESSAGE(prompt.ends_with("<|start|>user<|message|>hello<|end|><|start|>assistant"), prompt);
  // The answer ends at the first <|return|> or <|call|> if the target writes one, never later.
  const auto& ids = lines[0]["input_ids"];
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    if (lines[0]["loss_mask"][i] == 1) CHECK((ids[i] != 300 && ids[i] != 306));
  }

  std::ofstream(dir / "bad.jsonl")
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "no call before"}, )"
      << R"({"role": "user", "content": "again"}]})" << "\n";
  o = run_dflow("regenerate --target " + (dir / "target").string() + " --chats " + (dir / "bad.jsonl").string() +
                " --chat-template harmony --max-new-tokens 2 --out " + (dir / "bad_out.jsonl").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("bad.jsonl:1: messages[1] is a tool result with no assistant tool call") !=
                    std::string::npos,
                o.output);
  fs::remove_all(dir);
}
