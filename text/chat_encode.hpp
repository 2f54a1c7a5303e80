#pragma once
// A conversation to training ids and loss mask: rendered by a chat template,
// tokenized once as a whole (so the ids are exactly those of the rendered
// text), and each token's mask taken from the segment its first byte lies in.
// Masks are computed on token positions; no text is searched again.
#include <cstdint>
#include <vector>

#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"

namespace dflow::text {

struct ChatEncodeOptions {
  bool last_turn_only = false;  // 1 only on the last assistant message
  RenderOptions render;
};

struct ChatSample {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;  // 1 on assistant content and its end-of-turn token
};

ChatSample encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                       const Conversation& conversation, const ChatEncodeOptions& options = {});

// The prompt for regenerating the last assistant answer: the conversation up
// to its last user turn, rendered with the generation prompt.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                   const Conversation& conversation, bool enable_thinking);
// The same with every render option (add_generation_prompt is set here).
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                   const Conversation& conversation, RenderOptions options);

// "" (today's date, as the template would) or a valid YYYY-MM-DD; throws
// ConfigError naming `flag` otherwise.
std::string checked_current_date(const std::string& date, const std::string& flag);

}  // namespace dflow::text
