#include "text/regex_classes.hpp"

namespace dflow::text {
namespace {

constexpr std::string_view kSpace = R"(\t-\r\x{85}\p{Z})";
// Letters, digits and marks assigned in Unicode 15.0, 15.1 and 16.0, per
// general category (found by comparing with tokenizers 0.23 on every code
// point): PCRE2 10.42 has none of them, and assigns nothing they lack.
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
// The letter subcategories and marks that o200k's pattern (gpt-oss) names.
constexpr std::string_view kUppercase = R"(\p{Lu}\x{1C89}\x{A7CB}-\x{A7CC}\x{A7DA}\x{A7DC}\x{10D50}-\x{10D65})";
constexpr std::string_view kLowercase = R"(\p{Ll}\x{1C8A}\x{A7CD}\x{A7DB}\x{10D70}-\x{10D85}\x{1DF25}-\x{1DF2A})";
constexpr std::string_view kModifierLetters =
    R"(\p{Lm}\x{10D4E}\x{10D6F}\x{16D40}-\x{16D42}\x{16D6B}-\x{16D6C}\x{1E030}-\x{1E06D}\x{1E4EB})";
constexpr std::string_view kOtherLetters =
    R"(\p{Lo}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D4D}\x{10D4F}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240})"
    R"(\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3})"
    R"(\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446})"
    R"(\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D43}-\x{16D6A}\x{18CFF}\x{1B132}\x{1B155})"
    R"(\x{1E4D0}-\x{1E4EA}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kMarks =
    R"(\p{M}\x{897}\x{CF3}\x{ECE}\x{10D69}-\x{10D6D}\x{10EFC}-\x{10EFF}\x{11241}\x{113B8}-\x{113C0})"
    R"(\x{113C2}\x{113C5}\x{113C7}-\x{113CA}\x{113CC}-\x{113D0}\x{113D2}\x{113E1}-\x{113E2})"
    R"(\x{11F00}-\x{11F01}\x{11F03}\x{11F34}-\x{11F3A}\x{11F3E}-\x{11F42}\x{11F5A}\x{13440})"
    R"(\x{13447}-\x{13455}\x{1611E}-\x{1612F}\x{1E08F}\x{1E4EC}-\x{1E4EF}\x{1E5EE}-\x{1E5EF})";

struct ClassEscape {
  std::string_view escape;
  std::string_view body;  // a bracket expression's contents
};
// \p{Lt} is listed for completeness: Unicode 15 and 16 added no titlecase letter.
constexpr ClassEscape kClasses[] = {
    {R"(\s)", kSpace},           {R"(\p{L})", kLetters},          {R"(\p{N})", kNumbers},
    {R"(\p{Lu})", kUppercase},   {R"(\p{Ll})", kLowercase},       {R"(\p{Lt})", R"(\p{Lt})"},
    {R"(\p{Lm})", kModifierLetters}, {R"(\p{Lo})", kOtherLetters}, {R"(\p{M})", kMarks},
};

// What the escape at `pattern[i]` stands for inside brackets, and its length; empty: keep it.
std::string_view class_of(std::string_view pattern, size_t i, size_t& length) {
  const std::string_view escape = pattern.substr(i);
  for (const ClassEscape& c : kClasses) {
    if (escape.starts_with(c.escape)) {
      length = c.escape.size();
      return c.body;
    }
  }
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
        if (in_brackets) out += body;
        else out.append("[").append(body).append("]");
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
