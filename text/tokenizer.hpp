#pragma once
// A target's tokenizer from its Hugging Face tokenizer.json, for the
// byte-level BPE families (Qwen2 / Qwen2.5 / Qwen3, Llama 3): added tokens
// first, then the normalizer (NFC), the split regex, the byte-level alphabet
// and BPE. encode() gives the ids Hugging Face's `tokenizers` gives with
// add_special_tokens=False (dflow's chat templates write BOS themselves).
// Thread-safe after load.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/added_tokens.hpp"
#include "text/bpe.hpp"
#include "text/split_regex.hpp"

namespace dflow::text {

struct Encoding {
  std::vector<int32_t> ids;
  // Byte offset where each token starts in the normalized text (equal to the
  // input when normalization leaves it unchanged, see `normalized_changed`).
  std::vector<size_t> starts;
  bool normalized_changed = false;
};

class Tokenizer {
 public:
  // `path`: a tokenizer.json or a directory holding one; the added tokens of a
  // tokenizer_config.json beside it that tokenizer.json lacks are added as
  // transformers adds them (Qwen3.5/3.6's audio and TTS tokens). Throws ConfigError
  // naming the file for a missing file, bad JSON, or a tokenizer type dflow
  // does not implement (naming the type).
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& path);

  // Throws TextError for invalid UTF-8 (naming the byte offset).
  std::vector<int32_t> encode(std::string_view text) const;
  Encoding encode_with_offsets(std::string_view text) const;

  // The normalizer alone (NFC or nothing); `text` must be valid UTF-8.
  std::string normalize(std::string_view text) const;

  // Ids to UTF-8 text (invalid byte sequences become U+FFFD, as Hugging Face's
  // decode does). Throws TextError for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The id of a token given as text (an added token or a vocabulary entry), or nullopt.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The id of a token that must exist; throws ConfigError naming it and the file.
  int32_t require_token_id(std::string_view token) const;
  // One past the largest id (vocabulary and added tokens).
  int64_t vocab_size() const { return vocab_size_; }
  // A hash of everything that decides ids (vocabulary, merges, added tokens,
  // normalizer, split regex): equal fingerprints tokenize alike. 16 hex digits.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::filesystem::path& file() const { return file_; }

  struct Spec;  // what tokenizer.json says, parsed (tokenizer_json.cpp)
  explicit Tokenizer(Spec spec);
  ~Tokenizer();

 private:
  void encode_text(std::string_view text, size_t offset, Encoding& out) const;
  void encode_normalized(std::string_view text, size_t offset, Encoding& out) const;

  std::filesystem::path file_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<SplitRegex> split_;  // null: the whole text is one pre-token
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;  // index into added_
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;         // normalized: false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher_;  // normalized: true
  int64_t vocab_size_ = 0;
  std::string fingerprint_;
};

}  // namespace dflow::text
