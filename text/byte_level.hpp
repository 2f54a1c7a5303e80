#pragma once
// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one
// printable code point, so a BPE vocabulary of strings covers arbitrary bytes.
// tokenizer.json stores tokens in this alphabet; dflow keeps raw bytes.
#include <optional>
#include <string>
#include <string_view>

namespace dflow::text {

// The code point that stands for `byte` (printable bytes map to themselves).
char32_t byte_to_code_point(unsigned char byte);

// A vocabulary string in the byte-level alphabet back to raw bytes; nullopt
// when it holds a code point outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

}  // namespace dflow::text
