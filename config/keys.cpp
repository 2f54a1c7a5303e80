#include "config/keys.hpp"

#include <algorithm>
#include <charconv>

namespace dflow::config {

std::string type_label(const bool*) { return "boolean"; }
std::string type_label(const int*) { return "integer"; }
std::string type_label(const int64_t*) { return "integer"; }
std::string type_label(const uint64_t*) { return "non-negative integer"; }
std::string type_label(const double*) { return "number"; }
std::string type_label(const std::string*) { return "string"; }

void emit_value(YAML::Emitter& out, bool v) { out << v; }
void emit_value(YAML::Emitter& out, int v) { out << v; }
void emit_value(YAML::Emitter& out, int64_t v) { out << v; }
void emit_value(YAML::Emitter& out, uint64_t v) { out << v; }
void emit_value(YAML::Emitter& out, const std::string& v) { out << v; }

// Shortest text that reads back to the same double ("0.003", not
// "0.0030000000000000001"), so resolved configs and their diffs read well.
void emit_value(YAML::Emitter& out, double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";  // stays a float in YAML
  out << text;
}

namespace {
std::string not_one_of(const std::string& value, const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return "'" + value + "' is not one of: " + list + did_you_mean(value, allowed);
}
}  // namespace

std::optional<std::string> OneOf::operator()(const std::string& value) const {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return std::nullopt;
  return not_one_of(value, allowed);
}

std::optional<std::string> EachOneOf::operator()(const std::vector<std::string>& values) const {
  for (const auto& v : values)
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) return not_one_of(v, allowed);
  return std::nullopt;
}

Check<std::string> one_of(std::vector<std::string> allowed) { return OneOf{std::move(allowed)}; }
Check<std::vector<std::string>> each_one_of(std::vector<std::string> allowed) { return EachOneOf{std::move(allowed)}; }

}  // namespace dflow::config
