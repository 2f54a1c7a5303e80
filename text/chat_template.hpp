#pragma once
// Chat templates in C++: each renders a conversation exactly as the model's
// own Jinja chat template does (the tests compare with jinja2 rendering the
// real templates), as segments that say which text is the assistant's to learn.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/conversation.hpp"
#include "text/text_error.hpp"

namespace dflow::text {

// A conversation the template has no way to write (tool calls under Llama 3.0's).
class ChatTemplateError : public TextError {
 public:
  using TextError::TextError;
};

struct Segment {
  std::string text;
  bool trainable = false;  // assistant content and the token that ends its turn
  int message = -1;        // index of the message it belongs to; -1: template text
};

struct RenderOptions {
  bool add_generation_prompt = false;  // end with the prompt of a new assistant turn
  bool enable_thinking = true;         // qwen3, qwen3.5: false puts an empty think block into the generation prompt
  // harmony: the system message's "Current date: YYYY-MM-DD". Empty: today's
  // date in the local time zone, as transformers' strftime_now writes it.
  std::string current_date;
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  virtual std::string_view name() const = 0;
  // Throws ChatTemplateError, naming the message, for what the template cannot write.
  virtual std::vector<Segment> render(const Conversation& conversation, const RenderOptions& options) const = 0;
  // The token that ends an assistant turn ("<|im_end|>", "<|eot_id|>", harmony's "<|return|>").
  virtual std::string_view end_of_turn() const = 0;
  // The tokens generation stops at: end_of_turn(), and harmony's "<|call|>"
  // (the model hands over to a tool). Not harmony's "<|end|>": that ends its
  // analysis message, and the answer follows.
  virtual std::vector<std::string_view> stop_tokens() const { return {end_of_turn()}; }
};

// "qwen3", "qwen2.5" (alias "chatml"), "llama3", "harmony" (alias "gpt-oss"), "qwen3.5".
// Throws ConfigError listing the known names for any other.
const ChatTemplate& chat_template(std::string_view name);
std::vector<std::string> chat_template_names();

std::string join_segments(const std::vector<Segment>& segments);

}  // namespace dflow::text
