// Inputs the fuzz targets (fuzz/, tools/fuzz.sh) found to break a text
// reader, kept as tests of the fix. fuzz/RESULTS.md lists each finding.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "config/errors.hpp"
#include "text/chat_prepare.hpp"
#include "text/tokenizer.hpp"
#include "text_fixtures.hpp"

using namespace dflow::text;
using namespace dflow::text::test;
using nlohmann::json;

namespace {

std::string load_error(const TempDir& dir, const json& spec) {
  write_json(dir / "tokenizer.json", spec);
  try {
    Tokenizer::load(dir.path());
  } catch (const dflow::ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("TextFuzz.AddedTokenIdBeyondTheVocabularyRangeIsRefused") {
  // Found with fuzz_tokenizer_json's float id (below): get<int32_t>() wrapped
  // an id of 2^32 + 301 to 301 and took the token for another one.
  TempDir dir;
  json spec = tiny_tokenizer_json();
  spec["added_tokens"][1]["id"] = (int64_t{1} << 32) + 301;
  const auto message = load_error(dir, spec);
  CHECK_MESSAGE(message.find("added token \"<|im_end|>\" has id 4294967597, not an integer in [0, 65799)") !=
                    std::string::npos,
                message);
  spec["added_tokens"][1]["id"] = 301.5;
  CHECK(load_error(dir, spec).find("has id 301.5, not an integer") != std::string::npos);
}

TEST_CASE("TextFuzz.VocabIdThatIsNotAnIntegerIsRefused") {
  // fuzz_tokenizer_json: get<int64_t>() of 2.2e105 is undefined behaviour
  // (UBSan: outside the range of representable values of type 'long').
  TempDir dir;
  json spec = tiny_tokenizer_json();
  spec["model"]["vocab"]["a"] = 2.22222e105;
  const auto message = load_error(dir, spec);
  CHECK_MESSAGE(message.find("vocab token \"a\" has id 2.22222e+105, not an integer") != std::string::npos, message);
}

TEST_CASE("TextFuzz.ChatLineWithANumberTooLargeForADoubleIsBadJson") {
  // The same escape fuzz_jsonl_sample found in prepare's token-id lines
  // (nlohmann's out_of_range 406 is not a parse_error), in the conversation
  // line loop of chat_prepare.cpp.
  TempDir dir;
  write_json(dir / "tokenizer.json", tiny_tokenizer_json());
  {
    std::ofstream out(dir / "chats.jsonl");
    out << R"({"messages": [{"role": "user", "content": 1E400}]})" << "\n"
        << R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"}]})"
        << "\n";
  }
  ChatPrepareOptions options;
  options.input_path = dir / "chats.jsonl";
  options.out_dir = dir / "shards";
  options.tokenizer = dir.path();
  options.chat_template = "chatml";
  const auto report = prepare_chats(options);
  CHECK(report.samples_written == 1);
  REQUIRE(report.rejections.size() == 1);
  CHECK(report.rejections[0].line_number == 1);
  CHECK(report.rejections[0].reason == dflow::data::RejectReason::BadJson);
  CHECK_MESSAGE(report.rejections[0].detail.find("number overflow") != std::string::npos, report.rejections[0].detail);
}
