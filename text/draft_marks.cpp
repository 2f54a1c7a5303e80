#include "text/draft_marks.hpp"

namespace dflow::text {
namespace {

std::string decode_range(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens, size_t begin, size_t end) {
  return tokenizer.decode(std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                               tokens.begin() + static_cast<std::ptrdiff_t>(end)));
}

}  // namespace

std::string mark_accepted_drafts(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                                 const std::vector<int64_t>& acceptance_lengths) {
  if (tokens.empty()) return "";
  std::string text;
  size_t target_begin = 0, pos = 1;  // tokens[0] is the target's
  for (const int64_t tau : acceptance_lengths) {
    if (pos >= tokens.size()) break;
    const size_t drafts_end = std::min(tokens.size(), pos + static_cast<size_t>(tau - 1));
    if (drafts_end > pos) {
      text += decode_range(tokenizer, tokens, target_begin, pos);
      text += kDraftOpen;
      text += decode_range(tokenizer, tokens, pos, drafts_end);
      text += kDraftClose;
      target_begin = drafts_end;
    }
    pos = drafts_end + 1;  // the target's token after the accepted drafts
  }
  text += decode_range(tokenizer, tokens, target_begin, tokens.size());
  return text;
}

}  // namespace dflow::text
