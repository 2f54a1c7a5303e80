#pragma once
// Small UTF-8 helpers: validation with the offset of the first bad byte,
// code point iteration, and Python's str.strip() whitespace (chat templates
// are Jinja, whose `trim` is Python's strip()).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dflow::text {

inline constexpr size_t kValidUtf8 = static_cast<size_t>(-1);

// Byte offset of the first byte that is not part of a well-formed UTF-8
// sequence (overlongs, surrogates and code points > U+10FFFF are ill-formed),
// or kValidUtf8.
size_t find_invalid_utf8(std::string_view text);

// Throws TextError("invalid UTF-8 at byte N ...") when `text` is not valid.
void require_utf8(std::string_view text, std::string_view what);

// Decodes the code point at `pos` of valid UTF-8 and advances `pos`.
char32_t next_code_point(std::string_view text, size_t& pos);

// Python's str.isspace() for one code point.
bool is_python_space(char32_t c);

// Python's s.strip() / lstrip() / rstrip() without arguments (Unicode whitespace).
std::string_view python_strip(std::string_view text);
std::string_view python_lstrip(std::string_view text);
std::string_view python_rstrip(std::string_view text);

// s.strip(chars) / lstrip(chars) / rstrip(chars) for ASCII `chars`.
std::string_view strip_chars(std::string_view text, std::string_view chars);
std::string_view lstrip_chars(std::string_view text, std::string_view chars);
std::string_view rstrip_chars(std::string_view text, std::string_view chars);

// Invalid sequences replaced by U+FFFD (as Python's and Rust's lossy decoders do).
std::string to_valid_utf8(std::string_view bytes);

}  // namespace dflow::text
