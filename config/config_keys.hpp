#pragma once
// The run config's declared keys (config/keys.hpp) and the checks that span
// several of them.
#include <map>
#include <string>

#include "config/config.hpp"
#include "config/keys.hpp"

namespace dflow::config {

const KeySet<Config>& config_keys();

// Checks between keys (the largest bucket holds max_length, ...), after
// every key passed its own check. Throws ConfigError at the key.
void check_across_keys(const Config& c, const std::map<std::string, YamlSection>& sections);

}  // namespace dflow::config

namespace dflow::config {
// The configuration reference (docs/reference/config.md): one table row per declared key.
std::string config_reference_markdown();
}  // namespace dflow::config
