#include "text/utf8.hpp"

#include <fmt/format.h>

#include "text/text_error.hpp"

namespace dflow::text {
namespace {

// Length of the well-formed prefix of the sequence at `pos` (Unicode Table 3-7),
// and whether it is complete. An invalid lead byte gives {0, false}.
struct SequenceScan {
  size_t valid_bytes = 0;
  bool complete = false;
};

SequenceScan scan_sequence(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {1, true};
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  size_t i = 1;
  for (; i < length && pos + i < s.size(); ++i) {
    const unsigned char b = byte(pos + i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  return {i, i == length};
}

bool in_chars(char32_t c, std::string_view chars) {
  return c < 0x80 && chars.find(static_cast<char>(c)) != std::string_view::npos;
}

// Start of the code point that ends just before `end` (valid UTF-8).
size_t previous_code_point(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}

template <typename Predicate>
std::string_view lstrip_if(std::string_view s, Predicate strip) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!strip(next_code_point(s, next))) break;
    pos = next;
  }
  return s.substr(pos);
}

template <typename Predicate>
std::string_view rstrip_if(std::string_view s, Predicate strip) {
  size_t end = s.size();
  while (end > 0) {
    const size_t start = previous_code_point(s, end);
    size_t at = start;
    if (!strip(next_code_point(s, at))) break;
    end = start;
  }
  return s.substr(0, end);
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const auto scan = scan_sequence(text, pos);
    if (!scan.complete) return pos;
    pos += scan.valid_bytes;
  }
  return kValidUtf8;
}

void require_utf8(std::string_view text, std::string_view what) {
  const size_t bad = find_invalid_utf8(text);
  if (bad != kValidUtf8) {
    throw TextError(fmt::format("{}: invalid UTF-8 at byte {} (0x{:02X}); the input must be UTF-8 text", what, bad,
                                static_cast<unsigned char>(text[bad])));
  }
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i])); };
  const char32_t lead = b(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t c = ((lead & 0x1F) << 6) | (b(pos + 1) & 0x3F);
    pos += 2;
    return c;
  }
  if (lead < 0xF0) {
    const char32_t c = ((lead & 0x0F) << 12) | ((b(pos + 1) & 0x3F) << 6) | (b(pos + 2) & 0x3F);
    pos += 3;
    return c;
  }
  const char32_t c =
      ((lead & 0x07) << 18) | ((b(pos + 1) & 0x3F) << 12) | ((b(pos + 2) & 0x3F) << 6) | (b(pos + 3) & 0x3F);
  pos += 4;
  return c;
}

bool is_python_space(char32_t c) {
  if (c >= 0x09 && c <= 0x0D) return true;
  if (c >= 0x1C && c <= 0x20) return true;
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string_view python_lstrip(std::string_view text) { return lstrip_if(text, is_python_space); }
std::string_view python_rstrip(std::string_view text) { return rstrip_if(text, is_python_space); }
std::string_view python_strip(std::string_view text) { return python_rstrip(python_lstrip(text)); }

std::string_view lstrip_chars(std::string_view text, std::string_view chars) {
  return lstrip_if(text, [chars](char32_t c) { return in_chars(c, chars); });
}
std::string_view rstrip_chars(std::string_view text, std::string_view chars) {
  return rstrip_if(text, [chars](char32_t c) { return in_chars(c, chars); });
}
std::string_view strip_chars(std::string_view text, std::string_view chars) {
  return rstrip_chars(lstrip_chars(text, chars), chars);
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto scan = scan_sequence(bytes, pos);
    if (scan.complete) {
      out.append(bytes.substr(pos, scan.valid_bytes));
      pos += scan.valid_bytes;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal ill-formed subpart
      pos += scan.valid_bytes == 0 ? 1 : scan.valid_bytes;
    }
  }
  return out;
}

}  // namespace dflow::text
