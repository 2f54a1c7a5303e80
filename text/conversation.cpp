#include "text/conversation.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "text/tojson.hpp"

namespace dflow::text {
namespace {

using json = nlohmann::ordered_json;

std::optional<Role> parse_role(std::string_view name) {
  if (name == "system") return Role::System;
  if (name == "developer") return Role::Developer;
  if (name == "user" || name == "human") return Role::User;
  if (name == "assistant" || name == "gpt") return Role::Assistant;
  if (name == "tool" || name == "function" || name == "observation") return Role::Tool;
  return std::nullopt;
}

ConversationProblem problem(std::string reason, std::string detail) { return {std::move(reason), std::move(detail)}; }

// OpenAI's {"type": "function", "function": {"name", "arguments"}} or the bare {"name", "arguments"}.
std::optional<ConversationProblem> read_tool_calls(const json& list, const std::string& where,
                                                   std::vector<ToolCall>& out) {
  if (list.is_null()) return std::nullopt;
  if (!list.is_array()) return problem("wrong_type", fmt::format("{}.tool_calls is not an array", where));
  for (size_t k = 0; k < list.size(); ++k) {
    const json& item = list[k];
    const bool wrapped = item.is_object() && item.contains("function");
    const json& call = wrapped ? item["function"] : item;
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string() || !call.contains("arguments")) {
      return problem("wrong_type", fmt::format("{}.tool_calls[{}] is not {{\"function\": {{\"name\": string, "
                                               "\"arguments\": ...}}}}",
                                               where, k));
    }
    const json& arguments = call["arguments"];
    ToolCall read{call["name"].get<std::string>(),
                  arguments.is_string() ? arguments.get<std::string>() : python_tojson(arguments), arguments.is_string(),
                  std::nullopt};
    if (call.contains("content_type") && !call["content_type"].is_null()) {
      if (!call["content_type"].is_string()) {
        return problem("wrong_type", fmt::format("{}.tool_calls[{}].content_type is not a string", where, k));
      }
      read.content_type = call["content_type"].get<std::string>();
    }
    out.push_back(std::move(read));
  }
  return std::nullopt;
}

// vLLM's request field; only what a dflow template reads is kept.
std::optional<ConversationProblem> read_template_arguments(const json& kwargs, TemplateArguments& out) {
  if (kwargs.is_null()) return std::nullopt;
  if (!kwargs.is_object()) return problem("wrong_type", "chat_template_kwargs is not an object");
  for (const char* key : {"reasoning_effort", "model_identity"}) {
    if (!kwargs.contains(key) || kwargs[key].is_null()) continue;
    if (!kwargs[key].is_string()) return problem("wrong_type", fmt::format("chat_template_kwargs.{} is not a string", key));
  }
  if (kwargs.contains("reasoning_effort") && kwargs["reasoning_effort"].is_string()) {
    const std::string effort = kwargs["reasoning_effort"].get<std::string>();
    if (effort != "low" && effort != "medium" && effort != "high") {
      return problem("wrong_type",
                     fmt::format("chat_template_kwargs.reasoning_effort is '{}'; known: low, medium, high", effort));
    }
    out.reasoning_effort = effort;
  }
  if (kwargs.contains("model_identity") && kwargs["model_identity"].is_string()) {
    out.model_identity = kwargs["model_identity"].get<std::string>();
  }
  // Jinja's truthiness: a non-empty list (or any other true value) turns the tools on.
  if (kwargs.contains("builtin_tools")) {
    const json& tools = kwargs["builtin_tools"];
    const bool falsy = tools.is_null() || (tools.is_boolean() && !tools.get<bool>()) ||
                       ((tools.is_array() || tools.is_object()) && tools.empty()) ||
                       (tools.is_string() && tools.get<std::string>().empty());
    out.builtin_tools = !falsy;
  }
  return std::nullopt;
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::System: return "system";
    case Role::Developer: return "developer";
    case Role::User: return "user";
    case Role::Assistant: return "assistant";
    case Role::Tool: return "tool";
  }
  return "?";
}

std::optional<ConversationProblem> read_conversation(const json& line, Conversation& out) {
  out.messages.clear();
  out.tools.clear();
  out.arguments = {};
  if (!line.is_object()) return problem("wrong_type", "the line is not a JSON object");
  const bool openai = line.contains("messages");
  const bool sharegpt = !openai && line.contains("conversations");
  if (!openai && !sharegpt) return problem("missing_key", "no \"messages\" (role/content) or \"conversations\" (from/value)");
  const char* list_key = openai ? "messages" : "conversations";
  const char* role_key = openai ? "role" : "from";
  const char* content_key = openai ? "content" : "value";
  if (line.contains("tools") && !line["tools"].is_null()) {
    if (!line["tools"].is_array()) return problem("wrong_type", "tools is not an array");
    for (const json& tool : line["tools"]) out.tools.push_back(python_tojson(tool));
  }
  if (line.contains("chat_template_kwargs")) {
    if (auto bad = read_template_arguments(line["chat_template_kwargs"], out.arguments)) return bad;
  }
  const json& list = line[list_key];
  if (!list.is_array()) return problem("wrong_type", fmt::format("{} is not an array", list_key));
  if (list.empty()) return problem("empty", fmt::format("{} is empty", list_key));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    if (!item.is_object()) return problem("wrong_type", fmt::format("{}[{}] is not an object", list_key, i));
    if (!item.contains(role_key) || !item[role_key].is_string()) {
      return problem("wrong_type", fmt::format("{}[{}].{} is missing or not a string", list_key, i, role_key));
    }
    const std::string role_text = item[role_key].get<std::string>();
    const auto role = parse_role(role_text);
    if (!role) {
      return problem("unknown_role", fmt::format("{}[{}].{} is '{}'; known: system, developer, user (human), "
                                                 "assistant (gpt), tool",
                                                 list_key, i, role_key, role_text));
    }
    Message message{*role, "", std::nullopt, std::nullopt, {}};
    if (item.contains(content_key) && !item[content_key].is_null()) {
      if (!item[content_key].is_string()) {
        return problem("wrong_type", fmt::format("{}[{}].{} is not a string", list_key, i, content_key));
      }
      message.content = item[content_key].get<std::string>();
    }
    if (*role == Role::Assistant && item.contains("reasoning_content") && item["reasoning_content"].is_string()) {
      message.reasoning = item["reasoning_content"].get<std::string>();
    }
    if (*role == Role::Assistant && item.contains("thinking") && item["thinking"].is_string()) {
      message.thinking = item["thinking"].get<std::string>();
    }
    if (*role == Role::Assistant && item.contains("tool_calls")) {
      if (auto bad = read_tool_calls(item["tool_calls"], fmt::format("{}[{}]", list_key, i), message.tool_calls)) {
        return bad;
      }
    }
    out.messages.push_back(std::move(message));
  }
  return std::nullopt;
}

}  // namespace dflow::text
