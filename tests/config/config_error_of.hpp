#pragma once
// The message of the ConfigError that loading a config throws, for the
// config tests; any other exception escapes and fails the test.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/errors.hpp"

namespace dflow::testing {

inline std::string config_error_of(const std::string& yaml, const std::vector<std::string>& overrides = {},
                                   const std::string& source = "test.yaml") {
  try {
    config::load_config_text(yaml, source, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for: " << yaml);
  return {};
}

}  // namespace dflow::testing
