// The registered chat templates. Each mirrors one model's Jinja template
// line by line (sources: tests/text/templates/*.jinja, which the tests render
// with jinja2 and compare against these).
#include "text/chat_template.hpp"

#include <fmt/format.h>

#include "config/errors.hpp"
#include "text/chat_template_harmony.hpp"
#include "text/chat_template_qwen35.hpp"
#include "text/segment_output.hpp"
#include "text/tojson.hpp"
#include "text/utf8.hpp"

namespace dflow::text {
namespace {

bool is_tool_response(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

// Qwen2.5 and Qwen3 wrap tool results in one user turn per run of tool messages.
void add_tool_message(SegmentOutput& out, const Conversation& c, size_t i) {
  const auto& m = c.messages;
  if (i == 0 || m[i - 1].role != Role::Tool) out.add("<|im_start|>user");
  out.add("\n<tool_response>\n" + m[i].content + "\n</tool_response>");
  if (i + 1 == m.size() || m[i + 1].role != Role::Tool) out.add("<|im_end|>\n");
}

void add_chatml_turn(SegmentOutput& out, const Message& message) {
  out.add(fmt::format("<|im_start|>{}\n{}<|im_end|>\n", role_name(message.role), message.content));
}

// Qwen2.5's and Qwen3's system turn when the conversation offers tools.
std::string qwen_tools_system_turn(std::string_view system_text, const std::vector<std::string>& tools) {
  std::string turn = fmt::format(
      "<|im_start|>system\n{}# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
      system_text);
  for (const auto& tool : tools) turn += "\n" + tool;
  return turn + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call><|im_end|>\n";
}

// The calls of an assistant turn, as the model writes them (so learned): one
// block each, a newline before all but a first that follows no content.
// Qwen2.5 writes string arguments through tojson (quoted), Qwen3 as they are.
void add_tool_calls(SegmentOutput& out, const Message& message, bool after_content, bool quote_string_arguments, int index) {
  for (size_t k = 0; k < message.tool_calls.size(); ++k) {
    const ToolCall& call = message.tool_calls[k];
    if (k > 0 || after_content) out.add("\n", true, index);
    std::string arguments = call.arguments;
    if (call.arguments_is_string && quote_string_arguments) {
      arguments.clear();
      append_python_json_string(arguments, call.arguments);
    }
    out.add(fmt::format("<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call>", call.name, arguments),
            true, index);
  }
}

constexpr std::string_view kQwenDeveloperAdvice = "write the instructions as the first message, role system";

class Qwen3 final : public ChatTemplate {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::string_view end_of_turn() const override { return "<|im_end|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    refuse_role(c, Role::Developer, name(), kQwenDeveloperAdvice);
    SegmentOutput out;
    const auto& m = c.messages;
    const bool system_first = !m.empty() && m[0].role == Role::System;
    if (!c.tools.empty()) {
      out.add(qwen_tools_system_turn(system_first ? m[0].content + "\n\n" : "", c.tools));
    } else if (system_first) {
      add_chatml_turn(out, m[0]);
    }
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

  static void add_assistant(SegmentOutput& out, const Conversation& c, size_t i, size_t last_query) {
    const Message& message = c.messages[i];
    const int index = static_cast<int>(i);
    auto [reasoning, content] = split_reasoning(message, message.content);
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
    add_tool_calls(out, message, /*after_content=*/!content.empty(), /*quote_string_arguments=*/false, index);
    out.add("<|im_end|>", true, index);
    out.add("\n");
  }
};

constexpr std::string_view kQwen25DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

class Qwen25 final : public ChatTemplate {
 public:
  explicit Qwen25(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  std::string_view end_of_turn() const override { return "<|im_end|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    refuse_role(c, Role::Developer, name(), kQwenDeveloperAdvice);
    SegmentOutput out;
    const auto& m = c.messages;
    const bool system_first = !m.empty() && m[0].role == Role::System;
    if (!c.tools.empty()) {
      const std::string system = system_first ? m[0].content : std::string(kQwen25DefaultSystem);
      out.add(qwen_tools_system_turn(system + "\n\n", c.tools));
    } else if (system_first) {
      add_chatml_turn(out, m[0]);
    } else {
      out.add(fmt::format("<|im_start|>system\n{}<|im_end|>\n", kQwen25DefaultSystem));
    }
    for (size_t i = 0; i < m.size(); ++i) {
      const Message& message = m[i];
      const int index = static_cast<int>(i);
      if (message.role == Role::User || (message.role == Role::System && i > 0)) {
        add_chatml_turn(out, message);
      } else if (message.role == Role::Assistant) {
        out.add("<|im_start|>assistant\n");
        out.add(message.content, true, index);
        // With calls the template writes "\n" + content only when there is
        // content, and "\n<tool_call>" per call: the same text.
        add_tool_calls(out, message, /*after_content=*/!message.content.empty(), /*quote_string_arguments=*/true,
                       index);
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
    // Llama 3.0's template writes content only: calls and tools would vanish
    // from the text, and the turn would teach an empty answer.
    if (!c.tools.empty()) {
      throw ChatTemplateError("tools: the llama3 chat template (Llama 3.0's) has no way to offer tools; use a Qwen "
                              "template for tool-calling data, or leave the tools out");
    }
    SegmentOutput out;
    for (size_t i = 0; i < c.messages.size(); ++i) {
      const Message& message = c.messages[i];
      if (!message.tool_calls.empty()) {
        throw ChatTemplateError(fmt::format("messages[{}].tool_calls: the llama3 chat template (Llama 3.0's) has no "
                                            "format for tool calls; use a Qwen template for tool-calling data, or "
                                            "leave the calls out",
                                            i));
      }
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

std::pair<std::string, std::string> split_reasoning(const Message& message, std::string_view content) {
  if (message.reasoning) return {*message.reasoning, std::string(content)};
  const auto close = content.find("</think>");
  if (close == std::string_view::npos) return {"", std::string(content)};
  // Python: content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
  std::string_view before = rstrip_chars(content.substr(0, close), "\n");
  if (const auto open = before.rfind("<think>"); open != std::string_view::npos) before = before.substr(open + 7);
  // content.split('</think>')[-1].lstrip('\n')
  const std::string_view after = content.substr(content.rfind("</think>") + 8);
  return {std::string(lstrip_chars(before, "\n")), std::string(lstrip_chars(after, "\n"))};
}

void refuse_role(const Conversation& conversation, Role role, std::string_view template_name,
                 std::string_view advice) {
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    if (conversation.messages[i].role != role) continue;
    throw ChatTemplateError(fmt::format("messages[{}].role is '{}': the {} chat template has no such turn (its Jinja "
                                        "template would drop the message); {}",
                                        i, role_name(role), template_name, advice));
  }
}

const ChatTemplate& chat_template(std::string_view name) {
  static const Qwen3 qwen3;
  static const Qwen25 qwen25("qwen2.5"), chatml("chatml");
  static const Llama3 llama3;
  for (const ChatTemplate* t : std::initializer_list<const ChatTemplate*>{&qwen3, &qwen25, &chatml, &llama3,
                                                                          &harmony_template("harmony"),
                                                                          &harmony_template("gpt-oss"),
                                                                          &qwen35_template()}) {
    if (t->name() == name) return *t;
  }
  throw ConfigError(fmt::format("unknown chat template '{}'; known: {}{}", name, fmt::join(chat_template_names(), ", "),
                                did_you_mean(name, chat_template_names())));
}

std::vector<std::string> chat_template_names() {
  return {"qwen3", "qwen2.5", "chatml", "llama3", "harmony", "gpt-oss", "qwen3.5"};
}

std::string join_segments(const std::vector<Segment>& segments) {
  std::string text;
  for (const auto& segment : segments) text += segment.text;
  return text;
}

}  // namespace dflow::text
