// `--set section.key=value` overrides (config/config.cpp apply_override):
// one override per input line, applied to an empty config file (all
// defaults; the file itself is fuzz_config's subject, and a small one keeps
// this target fast). Round trips are fuzz_config's check too.
#include <algorithm>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::config;
  const std::string text(dflow::fuzz::as_text(data, size));
  std::vector<std::string> overrides;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    overrides.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  try {
    (void)load_config_text("", "empty.yaml", overrides);
  } catch (const dflow::ConfigError&) {
  }
  return 0;
}
