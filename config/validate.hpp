#pragma once
// Typed reading and validation of every config section (one function per
// section, each refusing unknown keys and out-of-range values by key path).
#include "config/config.hpp"

namespace dflow::config {

Config read_config(YamlSection root);

}  // namespace dflow::config
