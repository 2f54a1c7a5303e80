#pragma once
// dflow eval --show: a speculative output as text with the drafter's accepted
// tokens marked, so a user can see what the drafter got right.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.hpp"

namespace dflow::text {

inline constexpr std::string_view kDraftOpen = "\xE2\x9F\xA6";   // ⟦
inline constexpr std::string_view kDraftClose = "\xE2\x9F\xA7";  // ⟧

// `tokens[0]` is the target's; then each cycle c holds acceptance_lengths[c] - 1
// accepted drafts (wrapped in ⟦ ⟧) and one target token. Output cut short by
// max_new_tokens or EOS simply ends.
std::string mark_accepted_drafts(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                                 const std::vector<int64_t>& acceptance_lengths);

}  // namespace dflow::text
