#pragma once
// The one exception type of the data layer. Messages carry their own context
// (file and byte offset, JSONL line, sample id, batch) and say what to do, so
// the CLI can print what() as one line and exit non-zero.
#include <stdexcept>
#include <string>

namespace dflow::data {

class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace dflow::data
