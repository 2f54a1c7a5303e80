// Qwen3.5's chat template, line by line (tests/text/templates/qwen3.5.jinja,
// which the tests render with jinja2 and compare against this).
#include "text/chat_template_qwen35.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "text/segment_output.hpp"
#include "text/tojson.hpp"
#include "text/utf8.hpp"

namespace dflow::text {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kName = "qwen3.5";

constexpr std::string_view kToolsInstructions =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

bool is_query(const Message& message) {
  const std::string_view content = python_strip(message.content);
  return message.role == Role::User &&
         !(content.starts_with("<tool_response>") && content.ends_with("</tool_response>"));
}

// Python's truth value of a JSON value.
bool python_truthy(const json& value) {
  if (value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  return !value.empty();  // strings, arrays, objects
}

// A call's arguments as vLLM hands them to the template (its chat_utils parse
// a JSON string into an object, and make an empty or missing one {}): the
// template writes one <parameter> block per key, so they must be an object.
json call_arguments(const ToolCall& call, size_t i, size_t k) {
  const std::string where = fmt::format("messages[{}].tool_calls[{}].arguments", i, k);
  json arguments;
  if (!call.arguments_is_string) {
    arguments = json::parse(call.arguments);  // the JSON the reader wrote
    if (!python_truthy(arguments)) return json::object();
  } else {
    if (call.arguments.empty()) return json::object();
    arguments = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (arguments.is_discarded()) {
      throw ChatTemplateError(fmt::format("{} is a string that is not JSON: the {} chat template writes each "
                                          "argument as a <parameter=NAME> block; give the arguments as a JSON object",
                                          where, kName));
    }
  }
  if (!arguments.is_object()) {
    throw ChatTemplateError(fmt::format("{} is {}, not an object: the {} chat template writes each argument as a "
                                        "<parameter=NAME> block (its Jinja raises 'Can only get item pairs from a "
                                        "mapping'); give the arguments as a JSON object",
                                        where, arguments.type_name(), kName));
  }
  return arguments;
}

// `args_value | tojson` for objects and arrays, else `args_value | string` (Python's str()).
std::string parameter_value(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_null()) return "None";
  return python_tojson(value);  // numbers: str() and json.dumps agree; objects and arrays: tojson
}

void add_tool_calls(SegmentOutput& out, const Message& message, std::string_view content, size_t i) {
  const int index = static_cast<int>(i);
  for (size_t k = 0; k < message.tool_calls.size(); ++k) {
    const ToolCall& call = message.tool_calls[k];
    const std::string_view before = k > 0 ? "\n" : python_strip(content).empty() ? "" : "\n\n";
    std::string text = fmt::format("{}<tool_call>\n<function={}>\n", before, call.name);
    const json arguments = call_arguments(call, i, k);
    for (const auto& [key, value] : arguments.items()) {
      text += fmt::format("<parameter={}>\n{}\n</parameter>\n", key, parameter_value(value));
    }
    out.add(text + "</function>\n</tool_call>", true, index);
  }
}

void add_assistant(SegmentOutput& out, const Message& message, size_t i, size_t last_query) {
  const int index = static_cast<int>(i);
  auto [reasoning, content] = split_reasoning(message, python_strip(message.content));
  const std::string_view thought = python_strip(reasoning);
  if (i > last_query) {
    // The generation prompt ends "<think>\n": the model writes its reasoning
    // from there. An empty think block is the non-thinking prompt's, not its output.
    out.add("<|im_start|>assistant\n<think>\n");
    out.add(fmt::format("{}\n</think>\n\n", thought), !thought.empty(), index);
  } else {
    out.add("<|im_start|>assistant\n");
  }
  out.add(content, true, index);
  add_tool_calls(out, message, content, i);
  out.add("<|im_end|>", true, index);
  out.add("\n");
}

class Qwen35 final : public ChatTemplate {
 public:
  std::string_view name() const override { return kName; }
  std::string_view end_of_turn() const override { return "<|im_end|>"; }

  std::vector<Segment> render(const Conversation& c, const RenderOptions& options) const override {
    refuse_role(c, Role::Developer, name(), "write the instructions as the first message, role system");
    const auto& m = c.messages;
    size_t last_query = m.size();
    for (size_t i = m.size(); i-- > 0 && last_query == m.size();) {
      if (is_query(m[i])) last_query = i;
    }
    if (last_query == m.size()) {
      throw ChatTemplateError(fmt::format("messages: no user message that is a query (tool responses only, or no "
                                          "user turn); the {} chat template refuses such a conversation ('No user "
                                          "query found in messages.')",
                                          kName));
    }
    SegmentOutput out;
    const bool system_first = !m.empty() && m[0].role == Role::System;
    const std::string_view system = system_first ? python_strip(m[0].content) : std::string_view();
    if (!c.tools.empty()) {
      std::string turn = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
      for (const auto& tool : c.tools) turn += "\n" + tool;
      turn += "\n</tools>";
      turn += kToolsInstructions;
      if (!system.empty()) turn += fmt::format("\n\n{}", system);
      out.add(turn + "<|im_end|>\n");
    } else if (system_first) {
      out.add(fmt::format("<|im_start|>system\n{}<|im_end|>\n", system));
    }
    for (size_t i = 0; i < m.size(); ++i) {
      const Message& message = m[i];
      const std::string_view content = python_strip(message.content);
      if (message.role == Role::System && i > 0) {
        throw ChatTemplateError(fmt::format("messages[{}].role is 'system': the {} chat template takes a system "
                                            "message only first ('System message must be at the beginning.'); merge "
                                            "it into the first message",
                                            i, kName));
      }
      if (message.role == Role::User) {
        out.add(fmt::format("<|im_start|>user\n{}<|im_end|>\n", content));
      } else if (message.role == Role::Assistant) {
        add_assistant(out, message, i, last_query);
      } else if (message.role == Role::Tool) {
        // A run of tool results shares one user turn (the first message opens none).
        if (i > 0 && m[i - 1].role != Role::Tool) out.add("<|im_start|>user");
        out.add(fmt::format("\n<tool_response>\n{}\n</tool_response>", content));
        if (i + 1 == m.size() || m[i + 1].role != Role::Tool) out.add("<|im_end|>\n");
      }
    }
    if (options.add_generation_prompt) {
      out.add("<|im_start|>assistant\n");
      out.add(options.enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
    return out.take();
  }
};

}  // namespace

const ChatTemplate& qwen35_template() {
  static const Qwen35 instance;
  return instance;
}

}  // namespace dflow::text
