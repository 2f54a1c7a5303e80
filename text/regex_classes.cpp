#include "text/regex_classes.hpp"

namespace dflow::text {
namespace {

constexpr std::string_view kSpace = R"(\t-\r\x{85}\p{Z})";
// Letters and digits assigned in Unicode 15.0, 15.1 and 16.0 (found by
// comparing with tokenizers 0.23 on every code point).
constexpr std::string_view kLetters =
    R"(\p{L}\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E})"
    R"(\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10})"
    R"(\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D})"
    R"(\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kNumbers =
    R"(\p{N}\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
    R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

// What the escape at `pattern[i]` stands for inside brackets, and its length; empty: keep it.
std::string_view class_of(std::string_view pattern, size_t i, size_t& length) {
  const std::string_view escape = pattern.substr(i);
  length = 2;
  if (escape.starts_with(R"(\s)")) return kSpace;
  length = 5;
  if (escape.starts_with(R"(\p{L})")) return kLetters;
  if (escape.starts_with(R"(\p{N})")) return kNumbers;
  length = 2;
  return {};
}

}  // namespace

std::string with_tokenizers_classes(std::string_view pattern) {
  std::string out;
  bool in_brackets = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      size_t length = 2;
      const std::string_view body = class_of(pattern, i, length);
      if (!body.empty()) {
        out += in_brackets ? std::string(body) : "[" + std::string(body) + "]";
      } else if (pattern[i + 1] == 'S' && !in_brackets) {
        out += "[^" + std::string(kSpace) + "]";
      } else {
        out += pattern.substr(i, 2);  // \S inside brackets keeps PCRE2's meaning (U+180E aside, the same)
      }
      i += length - 1;
      continue;
    }
    out += c;
    if (in_brackets) {
      if (c == ']') in_brackets = false;
      if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:] inside brackets
        const size_t end = pattern.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out += pattern.substr(i + 1, end + 1 - i);
          i = end + 1;
        }
      }
    } else if (c == '[') {
      in_brackets = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a leading ] is literal
    }
  }
  return out;
}

}  // namespace dflow::text
