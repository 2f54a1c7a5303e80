// The message of what a call throws ("" when it returns): for tests that
// check a refusal names the file, key or value it is about.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace dflow::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace dflow::testing
