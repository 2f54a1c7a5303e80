#include "text/chat_encode.hpp"

#include <algorithm>

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
  Conversation prompt = conversation;
  while (!prompt.messages.empty() && prompt.messages.back().role != Role::User) prompt.messages.pop_back();
  RenderOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = enable_thinking;
  return tokenizer.encode(join_segments(chat_template.render(prompt, options)));
}

}  // namespace dflow::text
