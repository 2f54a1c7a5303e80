#pragma once
// Errors with context: where in which file (or which --set), which key, and
// what to do. The CLI maps ConfigError to exit code 2, everything else to 1.
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dflow {

// A place in a YAML source: file and 1-based line/column, or an override text.
struct SourceMark {
  std::string file;   // path, "<default>" for the embedded config, or "--set k=v"
  int line = 0;       // 1-based; 0 when unknown (an override)
  int column = 0;     // 1-based
  std::string str() const;  // "file:line:col" or "file"
};

class ConfigError : public std::runtime_error {
 public:
  ConfigError(const SourceMark& mark, const std::string& key_path, const std::string& message);
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

// The closest candidate by edit distance, or "" when none is close enough to
// be a plausible typo.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// ", did you mean 'x'?" or "" (for error messages).
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace dflow
