#pragma once
// The split regex's classes as the regex engine of Hugging Face `tokenizers`
// (Oniguruma) reads them, written out for PCRE2, which reads them otherwise:
//  - \s: Oniguruma's is \t-\r, U+0085 and the Z categories; PCRE2's (UCP)
//    also holds U+180E MONGOLIAN VOWEL SEPARATOR (format, not space, since
//    Unicode 6.3).
//  - \p{L}, \p{N}, and the \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo} \p{M} of
//    o200k's pattern (gpt-oss): tokenizers' tables know the letters, digits
//    and marks of Unicode 15.0 to 16.0, which PCRE2 10.42's (Unicode 14)
//    leave unassigned.
//  - (?i:...) needs nothing: PCRE2's caseless matching folds as Oniguruma's
//    does for the contractions ('S, 'ſ), which the exactness test covers.
// The exactness test (tests/text/split_regex_test.cpp) checks every code point.
#include <string>
#include <string_view>

namespace dflow::text {

// `pattern` with \s, \S (outside brackets), \p{L}, \p{N}, \p{Lu}, \p{Ll},
// \p{Lt}, \p{Lm}, \p{Lo} and \p{M} replaced by explicit classes; everything
// else as it is.
std::string with_tokenizers_classes(std::string_view pattern);

}  // namespace dflow::text
