// gpt-oss's chat template, line by line (tests/text/templates/gpt-oss.jinja,
// which the tests render with jinja2 and compare against this). What the
// model writes after the generation prompt "<|start|>assistant" is what it
// learns: each segment below says so, and chat_encode turns it into the mask.
#include "text/chat_template_harmony.hpp"

#include <fmt/format.h>

#include <ctime>

#include "text/harmony_tools.hpp"
#include "text/segment_output.hpp"
#include "text/tojson.hpp"

namespace dflow::text {
namespace {

constexpr std::string_view kDefaultIdentity = "You are ChatGPT, a large language model trained by OpenAI.";
constexpr std::string_view kChannels = "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
// The template refuses assistant text that carries channel tags.
constexpr std::string_view kChannelTags[] = {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"};

[[noreturn]] void refuse(size_t i, std::string_view what) {
  throw ChatTemplateError(fmt::format("messages[{}]{}", i, what));
}

void check_no_channel_tags(size_t i, std::string_view field, std::string_view text) {
  for (const std::string_view tag : kChannelTags) {
    if (text.find(tag) == std::string_view::npos) continue;
    refuse(i, fmt::format(".{} holds '{}': the harmony template takes an assistant's analysis text in 'thinking' "
                          "and its final answer in 'content', without channel tags",
                          field, tag));
  }
}

std::string system_message(const Conversation& c, const RenderOptions& options) {
  const auto& arguments = c.arguments;
  const std::string date = options.current_date.empty() ? today_local_date() : options.current_date;
  std::string text = "<|start|>system<|message|>";
  text += arguments.model_identity ? *arguments.model_identity : std::string(kDefaultIdentity);
  text += "\nKnowledge cutoff: 2024-06\nCurrent date: " + date + "\n\n";
  text += "Reasoning: " + arguments.reasoning_effort.value_or("medium") + "\n\n";
  text += kChannels;
  if (!c.tools.empty()) text += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  return text + "<|end|>";
}

class Harmony final : public ChatTemplate {
 public:
  explicit Harmony(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  // <|return|> ends the answer as training data and generation have it; the
  // template writes <|end|> in its place for earlier turns (history).
  std::string_view end_of_turn() const override { return "<|return|>"; }
  std::vector<std::string_view> stop_tokens() const override { return {"<|return|>", "<|call|>"}; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    check_supported(c);
    SegmentOutput out;
    out.add(system_message(c, options));
    const auto& m = c.messages;
    const bool instructions_first = !m.empty() && (m[0].role == Role::System || m[0].role == Role::Developer);
    const bool instructions = instructions_first && !m[0].content.empty();
    if (instructions || !c.tools.empty()) {
      std::string developer = "<|start|>developer<|message|>";
      if (instructions) developer += "# Instructions\n\n" + m[0].content + "\n\n";
      if (!c.tools.empty()) developer += "# Tools\n\n" + harmony_functions_namespace(c.tools);
      out.add(developer + "<|end|>");
    }
    std::optional<std::string> last_tool_call;
    for (size_t i = instructions_first ? 1 : 0; i < m.size(); ++i) {
      const Message& message = m[i];
      if (message.role == Role::Assistant) {
        add_assistant(out, c, i, options, last_tool_call);
      } else if (message.role == Role::Tool) {
        if (!last_tool_call) {
          refuse(i, " is a tool result with no assistant tool call before it; harmony names a result by the "
                    "function that was called");
        }
        std::string result = "<|start|>functions." + *last_tool_call + " to=assistant<|channel|>commentary<|message|>";
        append_python_json_string(result, message.content);
        out.add(result + "<|end|>");
      } else if (message.role == Role::User) {
        out.add("<|start|>user<|message|>" + message.content + "<|end|>");
      }
    }
    if (options.add_generation_prompt) out.add("<|start|>assistant");
    return out.take();
  }

 private:
  // What the template would drop or could not write is refused, naming the message.
  void check_supported(const Conversation& c) const {
    if (c.arguments.builtin_tools) {
      throw ChatTemplateError("chat_template_kwargs.builtin_tools: dflow's harmony template does not write the "
                              "browser and python tool descriptions; leave them out");
    }
    for (size_t i = 0; i < c.messages.size(); ++i) {
      const Message& message = c.messages[i];
      if (i > 0 && (message.role == Role::System || message.role == Role::Developer)) {
        refuse(i, fmt::format(".role is '{}' after the first message: the harmony template takes the instructions "
                              "from the first message only (its Jinja drops this one); merge it into the first",
                              role_name(message.role)));
      }
      if (message.role != Role::Assistant) continue;
      if (message.reasoning && !message.thinking) {
        refuse(i, ".reasoning_content: gpt-oss's template reads an assistant's reasoning from 'thinking' (it would "
                  "drop reasoning_content); rename the key");
      }
      if (message.tool_calls.size() > 1) {
        refuse(i, fmt::format(".tool_calls has {} calls: the harmony template writes one call per assistant "
                              "message (it would drop the others); split them into consecutive messages",
                              message.tool_calls.size()));
      }
      check_no_channel_tags(i, "content", message.content);
      if (message.thinking) check_no_channel_tags(i, "thinking", *message.thinking);
    }
  }

  static void add_assistant(SegmentOutput& out, const Conversation& c, size_t i, const RenderOptions& options,
                            std::optional<std::string>& last_tool_call) {
    const Message& message = c.messages[i];
    const int index = static_cast<int>(i);
    const std::string thinking = message.thinking.value_or("");
    out.add("<|start|>assistant");  // the generation prompt: template text
    if (!message.tool_calls.empty()) {
      // Analysis before a call is kept until a later assistant message answers without calls.
      bool final_answer_later = false;
      for (size_t k = i + 1; k < c.messages.size(); ++k) {
        final_answer_later |= c.messages[k].role == Role::Assistant && c.messages[k].tool_calls.empty();
      }
      if (!message.content.empty() && !thinking.empty()) {
        refuse(i, " has tool calls and both content and thinking: the harmony template takes the analysis before "
                  "a call from one of them; keep one");
      }
      const std::string& analysis = message.content.empty() ? thinking : message.content;
      if (!analysis.empty() && !final_answer_later) {
        out.add("<|channel|>analysis<|message|>" + analysis + "<|end|><|start|>assistant", true, index);
      }
      const ToolCall& call = message.tool_calls[0];
      std::string text = " to=functions." + call.name + "<|channel|>commentary " + call.content_type.value_or("json") +
                         "<|message|>";
      if (call.arguments_is_string) {
        append_python_json_string(text, call.arguments);  // tojson of a string: quoted
      } else {
        text += call.arguments;
      }
      out.add(text + "<|call|>", true, index);
      last_tool_call = call.name;
      return;
    }
    const bool training_turn = i + 1 == c.messages.size() && !options.add_generation_prompt;
    if (training_turn) {
      // The whole completion as the model writes it: its analysis, the final
      // message and <|return|>. An empty analysis is template text, not the
      // model's output.
      if (message.thinking) {
        out.add("<|channel|>analysis<|message|>" + thinking + "<|end|><|start|>assistant", !thinking.empty(),
                thinking.empty() ? -1 : index);
      }
      out.add("<|channel|>final<|message|>" + message.content + "<|return|>", true, index);
      return;
    }
    // An earlier turn, as history has it: the analysis dropped, and <|end|>
    // where the model wrote <|return|>: that <|end|> is not what it learns.
    out.add("<|channel|>final<|message|>" + message.content, true, index);
    out.add("<|end|>");
    last_tool_call.reset();
  }

  std::string name_;
};

}  // namespace

const ChatTemplate& harmony_template(std::string_view name) {
  static const Harmony harmony("harmony"), gpt_oss("gpt-oss");
  return name == "gpt-oss" ? static_cast<const ChatTemplate&>(gpt_oss) : harmony;
}

std::string today_local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &local);
  return text;
}

}  // namespace dflow::text
