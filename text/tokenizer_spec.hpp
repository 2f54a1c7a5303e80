#pragma once
// What a tokenizer.json says, once checked: the parts of Hugging Face's
// format that byte-level BPE tokenizers use. Anything else is refused by
// read_tokenizer_spec() with a message naming the file and the type.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/added_tokens.hpp"
#include "text/tokenizer.hpp"

namespace dflow::text {

struct Tokenizer::Spec {
  std::filesystem::path file;
  std::vector<std::string> vocab;  // raw bytes by id
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, rank order
  bool ignore_merges = false;
  bool nfc = false;
  std::optional<std::string> split_pattern;  // Split (Isolated) or ByteLevel's own GPT-2 regex
  std::vector<AddedToken> added_tokens;
};

// `path`: a tokenizer.json or a directory with one.
Tokenizer::Spec read_tokenizer_spec(const std::filesystem::path& path);

}  // namespace dflow::text
