#pragma once
// A conversation as users hold it: OpenAI-style {"messages": [{"role",
// "content"}]} or ShareGPT {"conversations": [{"from", "value"}]} (human ->
// user, gpt -> assistant), read into one form. An assistant message may carry
// its reasoning (`reasoning_content`, as Qwen3's template reads it, or
// `thinking`, as gpt-oss's reads it) and its `tool_calls`; the line may carry
// the `tools` the model was offered and `chat_template_kwargs` (as vLLM's
// requests carry them: gpt-oss's `reasoning_effort` and `model_identity`).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dflow::text {

enum class Role { System, Developer, User, Assistant, Tool };
std::string_view role_name(Role role);  // "system", "developer", "user", "assistant", "tool"

struct ToolCall {
  std::string name;
  std::string arguments;             // as given when a string, else its JSON as the templates' tojson writes it
  bool arguments_is_string = false;  // Qwen3 writes a string as it is, Qwen2.5 as a JSON string
  std::optional<std::string> content_type;  // gpt-oss: the call's `content_type` ("json" when absent)
};

struct Message {
  Role role = Role::User;
  std::string content;
  std::optional<std::string> reasoning;  // assistant only: `reasoning_content`
  std::optional<std::string> thinking;   // assistant only: `thinking`
  std::vector<ToolCall> tool_calls;      // assistant only
};

// The line's `chat_template_kwargs` that a dflow template reads.
struct TemplateArguments {
  std::optional<std::string> reasoning_effort;  // gpt-oss: "low", "medium" (the template's default), "high"
  std::optional<std::string> model_identity;    // gpt-oss: the system message's first line
  bool builtin_tools = false;                   // gpt-oss's browser/python tools: given, not implemented
};

struct Conversation {
  std::vector<Message> messages;
  std::vector<std::string> tools;  // each tool's JSON as tojson writes it; empty: no tools
  TemplateArguments arguments;
};

// Why a line is not a conversation: a stable reason name and the detail.
struct ConversationProblem {
  std::string reason;  // "wrong_type", "missing_key", "unknown_role", "empty"
  std::string detail;  // e.g. "messages[2].role is 'narrator'; known: system, user, assistant, tool"
};

// Fills `out` and returns nullopt, or says what is wrong. Accepts "messages"
// (role/content) or "conversations" (from/value). Parse the line as
// ordered_json: tool-call arguments are rendered with their keys in the order
// of the line, as Python keeps them.
std::optional<ConversationProblem> read_conversation(const nlohmann::ordered_json& line, Conversation& out);

}  // namespace dflow::text
