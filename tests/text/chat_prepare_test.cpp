#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/errors.hpp"
#include "data/data_error.hpp"
#include "data/shard_set.hpp"
#include "text/chat_prepare.hpp"
#include "text/dataset_tokenizer.hpp"
#include "text_fixtures.hpp"

namespace {

using namespace dflow::text;
using namespace dflow::text::test;
using dflow::data::RejectReason;
using nlohmann::json;

const char* kGood = R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"}]})";
const char* kShareGpt = R"({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})";

void write_lines(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& line : lines) out << line << "\n";
}

std::vector<json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

ChatPrepareOptions options_for(const TempDir& dir) {
  write_json(dir / "tokenizer.json", tiny_tokenizer_json());
  ChatPrepareOptions options;
  options.input_path = dir / "chats.jsonl";
  options.out_dir = dir / "shards";
  options.tokenizer = dir.path();
  options.chat_template = "chatml";
  options.out_jsonl = dir / "samples.jsonl";
  return options;
}

}  // namespace

TEST_CASE("PrepareChats.WritesShardsAndJsonlAndReportsEveryRejectedLine") {
  TempDir dir;
  auto options = options_for(dir);
  write_lines(options.input_path,
              {kGood, R"({"messages": [{"role": "user", "content": "x"},)", kShareGpt,
               R"({"messages": [{"role": "narrator", "content": "x"}]})", "",
               R"({"messages": [{"role": "user", "content": "no answer"}]})",
               R"({"conversations": [{"from": "human", "value": 3}]})"});
  const auto report = prepare_chats(options);
  CHECK(report.samples_written == 2);
  REQUIRE(report.rejections.size() == 4);
  CHECK(report.rejections[0].line_number == 2);
  CHECK(report.rejections[0].reason == RejectReason::BadJson);
  CHECK(report.rejections[1].line_number == 4);
  CHECK(report.rejections[1].reason == RejectReason::UnknownRole);
  CHECK(report.rejections[2].line_number == 6);
  CHECK(report.rejections[2].reason == RejectReason::NoAssistantTurn);
  CHECK(report.rejections[3].line_number == 7);
  CHECK(report.rejections[3].reason == RejectReason::WrongType);
  CHECK(report.summary().find("unknown_role 1") != std::string::npos);

  // The JSONL holds exactly what the shards hold, in input order.
  const auto shards = dflow::data::ShardSet::open(options.out_dir);
  const auto lines = read_jsonl(options.out_jsonl);
  REQUIRE(shards.size() == 2);
  REQUIRE(lines.size() == 2);
  for (int64_t i = 0; i < 2; ++i) {
    const auto sample = shards.sample(i);
    CHECK(lines[i]["input_ids"] == json(std::vector<int32_t>(sample.input_ids.begin(), sample.input_ids.end())));
    CHECK(lines[i]["loss_mask"] == json(std::vector<int>(sample.loss_mask.begin(), sample.loss_mask.end())));
  }
  // "hello world<|im_end|>" is learned: hello, " w", o, r, l, d, <|im_end|>.
  CHECK(std::count(lines[0]["loss_mask"].begin(), lines[0]["loss_mask"].end(), 1) == 7);
  const auto tokenizer = Tokenizer::load(dir.path());
  CHECK(recorded_tokenizer_fingerprint(options.out_dir) == tokenizer->fingerprint());
}

TEST_CASE("PrepareChats.TooLongSkipOrTruncate") {
  TempDir dir;
  auto options = options_for(dir);
  write_lines(options.input_path, {kGood, kShareGpt});
  options.max_length = 20;  // the default system prompt alone is longer
  options.too_long = dflow::data::TooLongPolicy::Skip;
  CHECK_THROWS_AS(prepare_chats(options), dflow::data::DataError);
  options.too_long = dflow::data::TooLongPolicy::Truncate;
  try {
    prepare_chats(options);
    FAIL("no error");
  } catch (const dflow::data::DataError& e) {
    CHECK(std::string(e.what()).find("no_response_tokens 2") != std::string::npos);
  }
}

TEST_CASE("PrepareChats.UnknownTemplateIsAConfigError") {
  TempDir dir;
  auto options = options_for(dir);
  write_lines(options.input_path, {kGood});
  options.chat_template = "vicuna";
  CHECK_THROWS_AS(prepare_chats(options), dflow::ConfigError);
  // The tiny tokenizer is ChatML's: it has no <|eot_id|> for Llama 3's template.
  options.chat_template = "llama3";
  try {
    prepare_chats(options);
    FAIL("no error");
  } catch (const dflow::ConfigError& e) {
    CHECK_MESSAGE(std::string(e.what()).find("has no token <|eot_id|>") != std::string::npos, e.what());
  }
}

TEST_CASE("DatasetTokenizer.TrainingWithAnotherTokenizerIsRefused") {
  TempDir dir;
  auto options = options_for(dir);
  write_lines(options.input_path, {kGood});
  prepare_chats(options);
  const std::vector<std::string> dirs{options.out_dir.string()};

  TempDir same, other, none;
  write_json(same / "tokenizer.json", tiny_tokenizer_json());
  CHECK_NOTHROW(check_dataset_tokenizer(dirs, same.path()));

  json changed = tiny_tokenizer_json();
  changed["added_tokens"][1]["content"] = "<|end|>";
  write_json(other / "tokenizer.json", changed);
  try {
    check_dataset_tokenizer(dirs, other.path());
    FAIL("no error");
  } catch (const dflow::ConfigError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(Tokenizer::load(dir.path())->fingerprint()) != std::string::npos, message);
    CHECK_MESSAGE(message.find(Tokenizer::load(other.path())->fingerprint()) != std::string::npos, message);
  }
  CHECK_THROWS_AS(check_dataset_tokenizer(dirs, none.path()), dflow::ConfigError);
  // Data prepared from token ids records no tokenizer: nothing to check.
  CHECK_NOTHROW(check_dataset_tokenizer({none.path().string()}, none.path()));
}

TEST_CASE("PrepareChats.ToolCallsUnderLlama3AreAConfigErrorNamingTheLine") {
  TempDir dir;
  auto options = options_for(dir);
  options.tokenizer = real_tokenizer("llama3");
  options.chat_template = "llama3";
  const std::string calls = R"("tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}])";
  write_lines(options.input_path, {kGood, R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", )" +
                                              calls + "}]}"});
  try {
    prepare_chats(options);
    FAIL("no error");
  } catch (const dflow::ConfigError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(options.input_path.string() + ":2:") != std::string::npos, message);
    CHECK_MESSAGE(message.find("messages[1].tool_calls") != std::string::npos, message);
  }
}
