#pragma once
// The BPE model of a byte-level tokenizer: vocabulary on raw bytes, merges
// by rank. One pre-token (a piece of the split regex) is encoded at a time,
// the lowest-ranked adjacent pair merged first, the leftmost on ties, as
// Hugging Face tokenizers does. Results per pre-token are cached.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dflow::text {

class BpeModel {
 public:
  // `vocab`: raw bytes of each token by id (ids without a token are empty);
  // `merges`: pairs of raw-byte tokens, in rank order. Throws ConfigError
  // naming `source` when a merge names an unknown token or a byte has no token.
  BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges, const std::string& source);

  // Appends the ids of one pre-token (raw bytes, non-empty).
  void encode(std::string_view pre_token, std::vector<int32_t>& out) const;

  int32_t find(std::string_view bytes) const;  // -1 when not in the vocabulary
  const std::string& bytes_of(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  size_t size() const { return vocab_.size(); }
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views into vocab_
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  bool ignore_merges_ = false;

  // Pre-token -> ids. Bounded: cleared when full (texts repeat their words).
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace dflow::text
