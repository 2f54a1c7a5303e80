#include "text/byte_level.hpp"

#include <array>
#include <unordered_map>

#include "text/utf8.hpp"

namespace dflow::text {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_code_point{};
  std::unordered_map<char32_t, unsigned char> to_byte;

  Alphabet() {
    // Printable Latin-1 ranges keep their value; the rest go to 256, 257, ...
    const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_code_point[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_code_point[b]] = static_cast<unsigned char>(b);
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
    const auto it = table.find(next_code_point(token, pos));
    if (it == table.end()) return std::nullopt;
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

}  // namespace dflow::text
