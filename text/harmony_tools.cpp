// gpt-oss's developer message "# Tools" section: each offered function as the
// TypeScript-like type its chat template writes (render_tool_namespace and
// render_typescript_type in tests/text/templates/gpt-oss.jinja), quirks kept:
// Jinja's whitespace between tags, and a flag set inside a for loop that
// never leaves it (the oneOf "any" branch is never taken).
#include "text/harmony_tools.hpp"

#include <fmt/format.h>

#include "text/chat_template.hpp"
#include "text/tojson.hpp"

namespace dflow::text {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw ChatTemplateError(fmt::format("{}: {}; gpt-oss's template cannot write it", where, what));
}

// Jinja's truthiness of a value that may be absent.
bool truthy(const json& spec, const char* key) {
  if (!spec.is_object() || !spec.contains(key)) return false;
  const json& v = spec[key];
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  return true;
}

bool is(const json& spec, const char* key, std::string_view value) {
  return spec.is_object() && spec.contains(key) && spec[key].is_string() && spec[key].get<std::string>() == value;
}

// Python's str() of a JSON value, as Jinja's join and + write it.
std::string python_str(const json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_null()) return "None";
  if (value.is_number()) return python_tojson(value);
  refuse(where, "a list or object where text is written");
}

// "+" in the template: both sides must be strings.
const std::string& text_of(const json& spec, const char* key, const std::string& where) {
  if (!spec[key].is_string()) refuse(where + "." + key, "not a string");
  return spec[key].get_ref<const std::string&>();
}

bool listed(const json& list, const std::string& name) {
  if (!list.is_array()) return false;
  for (const json& item : list) {
    if (item.is_string() && item.get<std::string>() == name) return true;
  }
  return false;
}

const json& required_of(const json& spec) {
  static const json none = json::array();
  return truthy(spec, "required") ? spec["required"] : none;
}

std::string typescript_type(const json& spec, const std::string& where) {
  const bool nullable = truthy(spec, "nullable");
  if (is(spec, "type", "array")) {
    std::string out = "any[]";
    if (truthy(spec, "items")) {
      const json& items = spec["items"];
      if (!items.is_object()) refuse(where + ".items", "not an object");
      if (is(items, "type", "string")) {
        out = "string[]";
      } else if (is(items, "type", "number") || is(items, "type", "integer")) {
        out = "number[]";
      } else if (is(items, "type", "boolean")) {
        out = "boolean[]";
      } else {
        const std::string inner = typescript_type(items, where + ".items");
        out = inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]";
      }
    }
    return nullable ? out + " | null" : out;
  }
  if (spec.is_object() && spec.contains("type") && spec["type"].is_array() && !spec["type"].empty()) {
    std::string out;
    for (const json& type : spec["type"]) out += (out.empty() ? "" : " | ") + python_str(type, where + ".type");
    return out;
  }
  if (truthy(spec, "oneOf")) {
    if (!spec["oneOf"].is_array()) refuse(where + ".oneOf", "not a list");
    std::string out;
    const json& variants = spec["oneOf"];
    for (size_t k = 0; k < variants.size(); ++k) {
      const json& variant = variants[k];
      const std::string at = fmt::format("{}.oneOf[{}]", where, k);
      out += typescript_type(variant, at);
      if (truthy(variant, "description")) out += "// " + text_of(variant, "description", at);
      if (variant.is_object() && variant.contains("default")) {
        out += std::string(20, ' ') + "// default: " + python_tojson(variant["default"]);
      }
      if (k + 1 < variants.size()) out += " | \n";
    }
    return out;
  }
  if (is(spec, "type", "string")) {
    if (!truthy(spec, "enum")) return nullable ? "string | null" : "string";
    if (!spec["enum"].is_array()) refuse(where + ".enum", "not a list");
    std::string out;
    for (const json& value : spec["enum"]) out += (out.empty() ? "" : "\" | \"") + python_str(value, where + ".enum");
    return "\"" + out + "\"";
  }
  if (is(spec, "type", "number") || is(spec, "type", "integer")) return "number";
  if (is(spec, "type", "boolean")) return "boolean";
  if (is(spec, "type", "object")) {
    if (!truthy(spec, "properties")) return "object";
    if (!spec["properties"].is_object()) refuse(where + ".properties", "not an object");
    std::string out = "{\n";
    const json& required = required_of(spec);
    bool first = true;
    for (const auto& [name, property] : spec["properties"].items()) {
      if (!first) out += ", ";
      first = false;
      // "{{ render_typescript_type(...) }}" on its own line: Jinja keeps the newline and indent before it.
      out += name + (listed(required, name) ? "" : "?") + ": " + "\n" + std::string(16, ' ') +
             typescript_type(property, where + ".properties." + name);
    }
    return out + "}";
  }
  return "any";
}

}  // namespace

std::string harmony_functions_namespace(const std::vector<std::string>& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (size_t t = 0; t < tools.size(); ++t) {
    const std::string where = fmt::format("tools[{}]", t);
    const json tool = json::parse(tools[t]);
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      refuse(where, "not {\"type\": \"function\", \"function\": {...}}");
    }
    const json& function = tool["function"];
    const std::string at = where + ".function";
    if (!function.contains("description")) refuse(at + ".description", "missing");
    if (!function.contains("name")) refuse(at + ".name", "missing");
    out += "// " + text_of(function, "description", at) + "\n";
    out += "type " + text_of(function, "name", at) + " = ";
    const json& parameters = function.contains("parameters") ? function["parameters"] : json();
    if (!truthy(function, "parameters") || !truthy(parameters, "properties")) {
      out += "() => any;\n\n";
      continue;
    }
    if (!parameters["properties"].is_object()) refuse(at + ".parameters.properties", "not an object");
    out += "(_: {\n";
    const json& required = required_of(parameters);
    for (const auto& [name, spec] : parameters["properties"].items()) {
      const std::string spec_at = at + ".parameters.properties." + name;
      if (truthy(spec, "description")) out += "// " + text_of(spec, "description", spec_at) + "\n";
      out += name + (listed(required, name) ? "" : "?") + ": " + typescript_type(spec, spec_at);
      if (spec.is_object() && spec.contains("default")) {
        const json& fallback = spec["default"];
        if (truthy(spec, "enum") || truthy(spec, "oneOf")) {
          if (!fallback.is_string()) refuse(spec_at + ".default", "not a string beside an enum or oneOf");
          out += (truthy(spec, "enum") ? ", // default: " : "// default: ") + fallback.get<std::string>();
        } else {
          out += ", // default: " + python_tojson(fallback);
        }
      }
      out += ",\n";
    }
    out += "}) => any;\n\n";
  }
  return out + "} // namespace functions";
}

}  // namespace dflow::text
