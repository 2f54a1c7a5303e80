#pragma once
// The pre-tokenizer's split regex (Hugging Face's Split with behavior
// Isolated): matches and the gaps between them become separate pieces.
// PCRE2 in UTF + UCP mode with JIT. Hugging Face uses Oniguruma, which reads
// \s, \p{L} and \p{N} otherwise: they are written out as Oniguruma reads them
// (regex_classes.hpp), and the exactness test checks every code point.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::text {

struct Piece {
  size_t begin = 0;  // byte offsets into the searched text
  size_t end = 0;
};

class SplitRegex {
 public:
  // Throws ConfigError naming `source` (e.g. "tokenizer.json pre_tokenizer") when the pattern does not compile.
  SplitRegex(const std::string& pattern, const std::string& source);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Appends the pieces of valid UTF-8 `text` (covering it entirely, in order) to `out`.
  void split(std::string_view text, std::vector<Piece>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dflow::text
