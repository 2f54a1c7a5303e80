#pragma once
// A conversation as users hold it: OpenAI-style {"messages": [{"role",
// "content"}]} or ShareGPT {"conversations": [{"from", "value"}]} (human ->
// user, gpt -> assistant), read into one form. An assistant message may carry
// its reasoning (`reasoning_content`), as Qwen3's template reads it.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dflow::text {

enum class Role { System, User, Assistant, Tool };
std::string_view role_name(Role role);  // "system", "user", "assistant", "tool"

struct Message {
  Role role = Role::User;
  std::string content;
  std::optional<std::string> reasoning;  // assistant only
};

struct Conversation {
  std::vector<Message> messages;
};

// Why a line is not a conversation: a stable reason name and the detail.
struct ConversationProblem {
  std::string reason;  // "wrong_type", "missing_key", "unknown_role", "empty"
  std::string detail;  // e.g. "messages[2].role is 'narrator'; known: system, user, assistant, tool"
};

// Fills `out` and returns nullopt, or says what is wrong. Accepts "messages"
// (role/content) or "conversations" (from/value).
std::optional<ConversationProblem> read_conversation(const nlohmann::json& line, Conversation& out);

}  // namespace dflow::text
