// YAML config and pipeline declarations (config/): the whole file as
// load_config_text reads it. A config that loads must also round-trip
// through to_yaml (config.hpp promises it); anything but a ConfigError is a
// finding. The round trip parses the full resolved config twice, so it is
// checked for one accepted input in eight (chosen by the input's bytes, so a
// crash reproduces) to keep the rate of executions up.
#include <cstdlib>
#include <string>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::config;
  const std::string text(dflow::fuzz::as_text(data, size));
  Config config;
  try {
    config = load_config_text(text, "fuzz.yaml");
  } catch (const dflow::ConfigError&) {
    return 0;
  }
  size_t hash = 0;
  for (size_t i = 0; i < size; ++i) hash = hash * 31 + data[i];
  if (hash % 8 != 0) return 0;
  const std::string yaml = to_yaml(config);
  try {
    const Config again = load_config_text(yaml, "round-trip.yaml");
    if (to_yaml(again) != yaml) std::abort();  // the resolved config changed on the way
  } catch (const dflow::ConfigError&) {
    std::abort();  // to_yaml wrote what load_config_text refuses
  }
  return 0;
}
