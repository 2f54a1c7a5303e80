#pragma once
// JSON written as the chat templates' `tojson` filter writes it under
// transformers' apply_chat_template: Python's json.dumps(value,
// ensure_ascii=False), keys in the order given, ", " and ": " separators,
// floats as Python's repr. Tool-call arguments and tool signatures are
// rendered with it.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dflow::text {

std::string python_tojson(const nlohmann::ordered_json& value);

// A string as a JSON string literal, escaped as json.dumps escapes it.
void append_python_json_string(std::string& out, std::string_view text);

}  // namespace dflow::text
