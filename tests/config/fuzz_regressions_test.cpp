// Inputs the fuzz targets (fuzz/, tools/fuzz.sh) found to break the config
// reader, kept as tests of the fix. fuzz/RESULTS.md lists each finding.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config_error_of.hpp"

using namespace dflow;
using namespace dflow::config;

namespace {

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return testing::config_error_of(yaml, overrides, "fuzz.yaml");
}

}  // namespace

TEST_CASE("ConfigFuzz.ListOrMappingAsAKeyIsAConfigErrorWithItsLine") {
  // fuzz_config: yaml-cpp's TypedBadConversion escaped from YamlSection::finish.
  auto msg = config_error("pipeline: {nodes: [{name: a, type: b}],[{from : ,aot: b, capacity: 1}]}\n");
  CHECK_MESSAGE(msg.rfind("fuzz.yaml:1:", 0) == 0, msg);
  CHECK_MESSAGE(msg.find("pipeline: expected a key name, got a list") != std::string::npos, msg);
  msg = config_error("train:\n  ? {a: 1}\n  : 2\n");
  CHECK_MESSAGE(msg.rfind("fuzz.yaml:2:", 0) == 0, msg);
  CHECK_MESSAGE(msg.find("train: expected a key name, got a mapping") != std::string::npos, msg);
}
