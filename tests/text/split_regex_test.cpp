// The split regex against the regex engine of Hugging Face `tokenizers`, on
// every Unicode code point: alone, between letters, digits, spaces and
// capitals, before "Aa" and after "x'", for
// Qwen2's, Llama 3's, gpt-oss's (o200k's) and Qwen3.5's (marks with letters) patterns (references: make_tokenizer_fixture.py's
// split_cases.jsonl, from tokenizers' pre_tokenize_str).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "text/split_regex.hpp"
#include "text_fixtures.hpp"

namespace {

using namespace dflow::text;
using namespace dflow::text::test;
using nlohmann::json;

std::string utf8_of(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Piece ends in code points, as pre_tokenize_str's offsets count them.
std::vector<int> piece_ends(const SplitRegex& regex, const std::string& text) {
  std::vector<Piece> pieces;
  regex.split(text, pieces);
  std::vector<int> ends;
  for (const Piece& piece : pieces) {
    int code_points = 0;
    for (size_t i = 0; i < piece.end; ++i) code_points += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    ends.push_back(code_points);
  }
  return ends;
}

}  // namespace

TEST_CASE("SplitRegex.EqualsHuggingFaceOnEveryCodePoint") {
  const auto path = fixture_dir() / "split_cases.jsonl";
  if (!std::filesystem::exists(path)) FAIL("no " << path.string() << ": run `ctest -R text` (fixture step)");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const json header = json::parse(line);
  std::map<std::string, std::unique_ptr<SplitRegex>> regexes;
  for (const auto& [name, pattern] : header["patterns"].items()) {
    regexes[name] = std::make_unique<SplitRegex>(pattern.get<std::string>(), name);
  }
  std::vector<std::pair<std::string, std::string>> contexts = header["contexts"];
  REQUIRE(contexts.size() == 7);
  REQUIRE(regexes.size() == 4);
  int64_t checked = 0, wrong = 0;
  while (std::getline(in, line)) {
    const json run = json::parse(line);
    for (uint32_t cp = run["first"]; cp <= run["last"].get<uint32_t>(); ++cp) {
      const std::string c = utf8_of(cp);
      for (const auto& [name, regex] : regexes) {
        for (size_t k = 0; k < contexts.size(); ++k) {
          const auto& [before, after] = contexts[k];
          const auto ends = piece_ends(*regex, before + c + after);
          ++checked;
          if (ends != run[name][k].get<std::vector<int>>() && ++wrong <= 8) {
            MESSAGE(fmt::format("U+{:04X} {}: {} pieces end at {}, tokenizers' at {}", cp, name,
                                json(before + c + after).dump(), json(ends).dump(), run[name][k].dump()));
          }
        }
      }
    }
  }
  CHECK(checked == int64_t{(0x110000 - 0x800) * 28});  // every code point but the surrogates, 4 patterns x 7 contexts
  CHECK(wrong == 0);
}
