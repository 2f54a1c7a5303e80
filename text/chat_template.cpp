// The registered chat templates. Each mirrors one model's Jinja template
// line by line (sources: tests/text/templates/*.jinja, which the tests render
// with jinja2 and compare against these).
#include "text/chat_template.hpp"

#include <fmt/format.h>

#include "config/errors.hpp"
#include "text/utf8.hpp"

namespace dflow::text {
namespace {

class Output {
 public:
  void add(std::string_view text, bool trainable = false, int message = -1) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().trainable == trainable && segments_.back().message == message) {
      segments_.back().text += text;
    } else {
      segments_.push_back({std::string(text), trainable, message});
    }
  }
  std::vector<Segment> take() { return std::move(segments_); }

 private:
  std::vector<Segment> segments_;
};

bool is_tool_response(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

// Qwen2.5 and Qwen3 wrap tool results in one user turn per run of tool messages.
void add_tool_message(Output& out, const Conversation& c, size_t i) {
  const auto& m = c.messages;
  if (i == 0 || m[i - 1].role != Role::Tool) out.add("<|im_start|>user");
  out.add("\n<tool_response>\n" + m[i].content + "\n</tool_response>");
  if (i + 1 == m.size() || m[i + 1].role != Role::Tool) out.add("<|im_end|>\n");
}

void add_chatml_turn(Output& out, const Message& message) {
  out.add(fmt::format("<|im_start|>{}\n{}<|im_end|>\n", role_name(message.role), message.content));
}

class Qwen3 final : public ChatTemplate {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::string_view end_of_turn() const override { return "<|im_end|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    Output out;
    const auto& m = c.messages;
    if (!m.empty() && m[0].role == Role::System) add_chatml_turn(out, m[0]);
    const size_t last_query = last_query_index(c);
    for (size_t i = 0; i < m.size(); ++i) {
      const Message& message = m[i];
      if (message.role == Role::User || (message.role == Role::System && i > 0)) {
        add_chatml_turn(out, message);
      } else if (message.role == Role::Assistant) {
        add_assistant(out, c, i, last_query);
      } else if (message.role == Role::Tool) {
        add_tool_message(out, c, i);
      }
    }
    if (options.add_generation_prompt) {
      out.add("<|im_start|>assistant\n");
      if (!options.enable_thinking) out.add("<think>\n\n</think>\n\n");
    }
    return out.take();
  }

 private:
  // The last user message that is a real query (not a wrapped tool response).
  static size_t last_query_index(const Conversation& c) {
    const auto& m = c.messages;
    for (size_t i = m.size(); i-- > 0;) {
      if (m[i].role == Role::User && !is_tool_response(m[i].content)) return i;
    }
    return m.size() - 1;
  }

  static void add_assistant(Output& out, const Conversation& c, size_t i, size_t last_query) {
    const Message& message = c.messages[i];
    const int index = static_cast<int>(i);
    std::string content = message.content;
    std::string reasoning;
    if (message.reasoning) {
      reasoning = *message.reasoning;
    } else if (const auto close = content.find("</think>"); close != std::string::npos) {
      // Python: content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
      std::string_view before = rstrip_chars(std::string_view(content).substr(0, close), "\n");
      if (const auto open = before.rfind("<think>"); open != std::string_view::npos) {
        before = before.substr(open + 7);
      }
      reasoning = std::string(lstrip_chars(before, "\n"));
      // content.split('</think>')[-1].lstrip('\n')
      content = std::string(lstrip_chars(std::string_view(content).substr(content.rfind("</think>") + 8), "\n"));
    }
    out.add("<|im_start|>assistant\n");
    const bool last = i + 1 == c.messages.size();
    if (i > last_query && (last || !reasoning.empty())) {
      const std::string_view thought = strip_chars(reasoning, "\n");
      // An empty think block is template text (the non-thinking mode's prompt), not the model's output.
      out.add(fmt::format("<think>\n{}\n</think>\n\n", thought), !thought.empty(), index);
      out.add(lstrip_chars(content, "\n"), true, index);
    } else {
      out.add(content, true, index);
    }
    out.add("<|im_end|>", true, index);
    out.add("\n");
  }
};

class Qwen25 final : public ChatTemplate {
 public:
  explicit Qwen25(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  std::string_view end_of_turn() const override { return "<|im_end|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    Output out;
    const auto& m = c.messages;
    if (!m.empty() && m[0].role == Role::System) {
      add_chatml_turn(out, m[0]);
    } else {
      out.add("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    }
    for (size_t i = 0; i < m.size(); ++i) {
      const Message& message = m[i];
      const int index = static_cast<int>(i);
      if (message.role == Role::User || (message.role == Role::System && i > 0)) {
        add_chatml_turn(out, message);
      } else if (message.role == Role::Assistant) {
        out.add("<|im_start|>assistant\n");
        out.add(message.content, true, index);
        out.add("<|im_end|>", true, index);
        out.add("\n");
      } else if (message.role == Role::Tool) {
        add_tool_message(out, c, i);
      }
    }
    if (options.add_generation_prompt) out.add("<|im_start|>assistant\n");
    return out.take();
  }

 private:
  std::string name_;
};

class Llama3 final : public ChatTemplate {
 public:
  std::string_view name() const override { return "llama3"; }
  std::string_view end_of_turn() const override { return "<|eot_id|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    Output out;
    for (size_t i = 0; i < c.messages.size(); ++i) {
      const Message& message = c.messages[i];
      if (i == 0) out.add("<|begin_of_text|>");
      out.add(fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", role_name(message.role)));
      const bool assistant = message.role == Role::Assistant;
      const int index = assistant ? static_cast<int>(i) : -1;
      out.add(python_strip(message.content), assistant, index);  // Jinja's `trim`
      out.add("<|eot_id|>", assistant, index);
    }
    if (options.add_generation_prompt) out.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return out.take();
  }
};

}  // namespace

const ChatTemplate& chat_template(std::string_view name) {
  static const Qwen3 qwen3;
  static const Qwen25 qwen25("qwen2.5"), chatml("chatml");
  static const Llama3 llama3;
  for (const ChatTemplate* t : std::initializer_list<const ChatTemplate*>{&qwen3, &qwen25, &chatml, &llama3}) {
    if (t->name() == name) return *t;
  }
  throw ConfigError(fmt::format("unknown chat template '{}'; known: {}{}", name, fmt::join(chat_template_names(), ", "),
                                did_you_mean(name, chat_template_names())));
}

std::vector<std::string> chat_template_names() { return {"qwen3", "qwen2.5", "chatml", "llama3"}; }

std::string join_segments(const std::vector<Segment>& segments) {
  std::string text;
  for (const auto& segment : segments) text += segment.text;
  return text;
}

}  // namespace dflow::text
