#pragma once
// dflow tokenize: {"text": ...} lines to {"ids": [...]} lines, or back with
// decode. How users and tests check tokenization from the command line.
#include <cstdint>
#include <iosfwd>
#include <string>

#include "text/tokenizer.hpp"

namespace dflow::text {

struct TokenizeJsonlOptions {
  bool decode = false;               // {"ids"} -> {"text"}
  bool skip_special_tokens = false;  // decode only
};

// Returns the number of lines converted. A bad line (not JSON, invalid UTF-8,
// no "text" / "ids", an unknown id) throws TextError naming `source:line`.
int64_t tokenize_jsonl(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, const std::string& source,
                       const TokenizeJsonlOptions& options = {});

}  // namespace dflow::text
