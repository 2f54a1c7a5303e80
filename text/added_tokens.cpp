#include "text/added_tokens.hpp"

#include <algorithm>
#include <cstring>

namespace dflow::text {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) {
  for (const AddedToken* token : tokens) {
    if (!token->content.empty()) tokens_.push_back({token->content, token->id});
  }
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<uint32_t>(i));
  }
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t from) const {
  if (tokens_.empty()) return {};
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    for (const uint32_t index : candidates) {  // longest first
      const Entry& entry = tokens_[index];
      if (entry.content.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, entry.content.data(), entry.content.size()) == 0) {
        return {pos, pos + entry.content.size(), entry.id};
      }
    }
  }
  return {};
}

}  // namespace dflow::text
