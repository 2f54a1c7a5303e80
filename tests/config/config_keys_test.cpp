// Every declared key (config/config_keys.cpp) is read, printed, suggested,
// type-checked and documented through its one declaration; a test here fails
// when a key is missing from any of those.
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "config/config.hpp"
#include "config/config_keys.hpp"
#include "config_error_of.hpp"

using dflow::ConfigError;
using dflow::config::config_keys;
using dflow::config::load_config_text;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return ::dflow::testing::config_error_of(yaml, overrides);
}

YAML::Node node_at(YAML::Node root, const std::string& path) {
  std::vector<YAML::Node> chain{root};
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) chain.push_back(chain.back()[part]);
  return chain.back();
}
}  // namespace

TEST_CASE("ConfigKeys.every_key_is_printed_and_reads_back") {
  const dflow::config::Config defaults;
  const YAML::Node printed = YAML::Load(dflow::config::to_yaml(defaults));
  for (const auto& k : config_keys().keys()) {
    CAPTURE(k.path);
    const YAML::Node value = node_at(printed, k.path);
    REQUIRE(value.IsDefined());
    // The printed value, set with --set, reads back to the same value.
    YAML::Emitter e;
    e << YAML::Flow;
    e << value;
    auto again = load_config_text("{}", "test.yaml", {k.path + "=" + std::string(e.c_str())});
    CHECK(config_keys().value_text(k, again) == config_keys().value_text(k, defaults));
  }
}

TEST_CASE("ConfigKeys.every_key_is_type_checked_and_named") {
  for (const auto& k : config_keys().keys()) {
    CAPTURE(k.path);
    const std::string message = error_of("{}", {k.path + "={bad: 1}"});
    CHECK(message.find(k.path) != std::string::npos);
    CHECK(message.find("expected") != std::string::npos);
  }
}

TEST_CASE("ConfigKeys.every_key_is_suggested_for_a_typo") {
  for (const auto& k : config_keys().keys()) {
    CAPTURE(k.path);
    const std::string typo = k.path + "x";
    CHECK(error_of("{}", {typo + "=1"}).find("did you mean '" + k.path + "'") != std::string::npos);
  }
}

TEST_CASE("ConfigKeys.a_key_that_moved_names_its_new_place") {
  const std::string message = error_of("data: {batch_size: 8}\n");
  CHECK(message.find("test.yaml:1:") != std::string::npos);
  CHECK(message.find("data.batch_size") != std::string::npos);
  CHECK(message.find("has moved") != std::string::npos);
  CHECK(message.find("pad_bucket.fixed_batch") != std::string::npos);
}
