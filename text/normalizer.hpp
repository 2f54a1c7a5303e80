#pragma once
// Unicode normalization of a tokenizer.json `normalizer` (NFC: the Qwen
// family's), through utf8proc.
#include <string>
#include <string_view>

namespace dflow::text {

// NFC of valid UTF-8. ASCII-only text is returned unchanged without a copy step.
std::string nfc(std::string_view text);

}  // namespace dflow::text
