// `dflow sweep`'s grid (config/sweep_plan.cpp): lines "V <text>" are --vary
// arguments, "N <text>" --variant ones, the first line's length (mod 3) + 1
// the seeds. Each variant's overrides are then loaded as --set would load
// them (the first 16 variants: the grid multiplies). Invariants: every
// variant has a distinct, non-empty name made only of the characters a
// directory name keeps, and ends with its run.seed override.
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/sweep_plan.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::config;
  const std::string text(dflow::fuzz::as_text(data, size));
  std::vector<SweepAxis> axes;
  SweepAxis named;
  int seeds = 1;
  try {
    for (size_t begin = 0, line = 0; begin <= text.size(); ++line) {
      const size_t end = std::min(text.find('\n', begin), text.size());
      const std::string l = text.substr(begin, end - begin);
      begin = end + 1;
      if (line == 0) seeds = static_cast<int>(l.size() % 3) + 1;
      if (l.rfind("V ", 0) == 0) axes.push_back(parse_vary(l.substr(2)));
      if (l.rfind("N ", 0) == 0) add_named_variant(named, l.substr(2));
      if (axes.size() > 4) break;
    }
    if (!named.values.empty()) axes.insert(axes.begin(), named);
    size_t combinations = 1;
    for (const auto& a : axes) combinations *= a.values.size();
    if (combinations > 4096) return 0;  // a grid this size is the user's choice, not a finding
    const auto variants = sweep_variants(axes, seeds, 1);
    std::set<std::string> names;
    for (const auto& v : variants) {
      if (v.name.empty() || !names.insert(v.name).second) __builtin_trap();
      for (char ch : v.name)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' || ch == '=' || ch == '+'))
          __builtin_trap();
      if (v.overrides.empty() || v.overrides.back() != "run.seed=" + std::to_string(v.seed)) __builtin_trap();
    }
    for (size_t i = 0; i < variants.size() && i < 16; ++i) {
      try {
        (void)load_config_text("", "empty.yaml", variants[i].overrides);
      } catch (const dflow::ConfigError&) {
      }
    }
  } catch (const dflow::ConfigError&) {
  }
  return 0;
}
