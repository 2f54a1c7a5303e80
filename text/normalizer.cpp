#include "text/normalizer.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "text/text_error.hpp"

namespace dflow::text {

std::string nfc(std::string_view text) {
  // Below U+0300 nothing composes or decomposes under NFC: skip the work for
  // ASCII and Latin-1 text.
  const bool trivially_nfc = std::all_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0xCC;  // lead bytes up to U+02FF
  });
  if (trivially_nfc) return std::string(text);
  utf8proc_uint8_t* result = nullptr;
  const auto length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (length < 0) throw TextError(std::string("NFC normalization failed: ") + utf8proc_errmsg(length));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
}

}  // namespace dflow::text
