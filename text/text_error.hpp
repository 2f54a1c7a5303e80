#pragma once
// Errors of the text layer. A tokenizer file or template name that dflow
// refuses is a ConfigError (the CLI exits 2); bad input text is a TextError
// whose message says where (byte offset; callers add file and line).
#include <stdexcept>
#include <string>

namespace dflow::text {

class TextError : public std::runtime_error {
 public:
  explicit TextError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace dflow::text
