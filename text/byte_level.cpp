#include "text/byte_level.hpp"

#include <array>
#include <cstdint>

#include "text/utf8.hpp"

namespace dflow::text {
namespace {

// The alphabet's code points are all below 324.
constexpr char32_t kAlphabetEnd = 324;

struct Alphabet {
  std::array<char32_t, 256> to_code_point{};
  std::array<int16_t, kAlphabetEnd> to_byte{};  // -1: not in the alphabet

  Alphabet() {
    // Printable Latin-1 ranges keep their value; the rest go to 256, 257, ...
    const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_code_point[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

char32_t byte_to_code_point(unsigned char byte) { return alphabet().to_code_point[byte]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  if (find_invalid_utf8(token) != kValidUtf8) return std::nullopt;
  const auto& table = alphabet().to_byte;
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t c = next_code_point(token, pos);
    if (c >= kAlphabetEnd || table[c] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(table[c]));
  }
  return bytes;
}

}  // namespace dflow::text
