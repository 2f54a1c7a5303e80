#include "text/chat_encode.hpp"

#include <algorithm>
#include <regex>

#include "config/errors.hpp"

namespace dflow::text {

ChatSample encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                       const Conversation& conversation, const ChatEncodeOptions& options) {
  auto segments = chat_template.render(conversation, options.render);
  // Normalizing each segment first keeps the byte offsets of the whole text
  // exact (the tokenizer's own normalization then changes nothing).
  for (auto& segment : segments) segment.text = tokenizer.normalize(segment.text);
  int last_assistant = -1;
  for (const auto& segment : segments) {
    if (segment.trainable) last_assistant = std::max(last_assistant, segment.message);
  }
  std::vector<size_t> segment_end;  // byte offset where each segment ends
  std::string text;
  for (const auto& segment : segments) {
    text += segment.text;
    segment_end.push_back(text.size());
  }
  Encoding encoding = tokenizer.encode_with_offsets(text);
  ChatSample sample;
  sample.input_ids = std::move(encoding.ids);
  sample.loss_mask.resize(sample.input_ids.size());
  size_t s = 0;
  for (size_t t = 0; t < sample.input_ids.size(); ++t) {
    while (s + 1 < segments.size() && encoding.starts[t] >= segment_end[s]) ++s;
    const Segment& segment = segments[s];
    const bool learn = segment.trainable && (!options.last_turn_only || segment.message == last_assistant);
    sample.loss_mask[t] = learn ? 1 : 0;
  }
  return sample;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                   const Conversation& conversation, bool enable_thinking) {
  RenderOptions options;
  options.enable_thinking = enable_thinking;
  return encode_prompt(tokenizer, chat_template, conversation, options);
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                   const Conversation& conversation, RenderOptions options) {
  Conversation prompt = conversation;
  while (!prompt.messages.empty() && prompt.messages.back().role != Role::User) prompt.messages.pop_back();
  options.add_generation_prompt = true;
  return tokenizer.encode(join_segments(chat_template.render(prompt, options)));
}

std::string checked_current_date(const std::string& date, const std::string& flag) {
  if (date.empty()) return date;
  static const std::regex pattern("([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])");
  if (!std::regex_match(date, pattern)) {
    throw ConfigError(flag + " '" + date + "' is not a date YYYY-MM-DD (the harmony system message's \"Current date\")");
  }
  return date;
}

}  // namespace dflow::text
