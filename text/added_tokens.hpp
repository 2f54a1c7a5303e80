#pragma once
// Added tokens (<|im_start|>, <|im_end|>, <think>, ...) are found in the text
// before any BPE, leftmost first and the longest at one position (as Hugging
// Face's added vocabulary does), so a literal "<|im_end|>" inside a message is
// the special token.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;     // skipped by decode(skip_special_tokens)
  bool normalized = false;  // matched in the normalized text instead of the raw one
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);

  struct Match {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;  // -1: no match
  };
  // The leftmost, then longest, token in `text` at or after `from`.
  Match find(std::string_view text, size_t from) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Entry {
    std::string content;
    int32_t id;
  };
  std::vector<Entry> tokens_;                   // longest first
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_
};

}  // namespace dflow::text
