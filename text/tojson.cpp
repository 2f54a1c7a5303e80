#include "text/tojson.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace dflow::text {
namespace {

// Python's repr(float): the shortest digits that read back, in positional
// notation when the decimal exponent is in [-4, 16), else as 1.5e+16 / 1e-05.
std::string python_float(double value) {
  if (std::isnan(value)) return "NaN";  // json.dumps' spelling; JSON input cannot hold them
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string_view scientific(buffer, static_cast<size_t>(result.ptr - buffer));  // "-1.2345e+06"
  const size_t e = scientific.find('e');
  const bool negative = scientific.front() == '-';
  std::string digits;
  for (const char c : scientific.substr(0, e)) {
    if (c >= '0' && c <= '9') digits += c;
  }
  const int exponent = std::atoi(std::string(scientific.substr(e + 1)).c_str());
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) return out + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

void append(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_json_string(out, key);
        out += ": ";
        append(out, item);
      }
      out += '}';
      return;
    }
    case Type::array: {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ", ";
        append(out, value[i]);
      }
      out += ']';
      return;
    }
    case Type::string: append_python_json_string(out, value.get_ref<const std::string&>()); return;
    case Type::number_float: out += python_float(value.get<double>()); return;
    default: out += value.dump(); return;  // null, booleans and integers are spelled alike
  }
}

}  // namespace

void append_python_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;  // ensure_ascii=False: everything else as it is, U+007F and non-ASCII included
        }
    }
  }
  out += '"';
}

std::string python_tojson(const nlohmann::ordered_json& value) {
  std::string out;
  append(out, value);
  return out;
}

}  // namespace dflow::text
