// Every declared key (config/config_keys.cpp) is read, printed, suggested,
// type-checked and documented through its one declaration; a test here fails
// when a key is missing from any of those.
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
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
  const auto open = config_keys().open_sections();
  for (const auto& k : config_keys().keys()) {
    CAPTURE(k.path);
    // A section whose other keys are another reader's (model.drafter: the
    // drafter kind's) keeps a typo for that reader, which refuses it with the
    // suggestion (tests/nodes/drafter_kind_config_test.cpp).
    if (std::find(open.begin(), open.end(), k.section()) != open.end()) continue;
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

// model.drafter holds the drafter kind's params beside its declared keys: the
// config keeps them as given (the kind reads and checks them, outside
// config/), prints them with the rest and reads them back; --set reaches
// them as the file does; every other section still refuses an unknown key.
TEST_CASE("ConfigKeys.model_drafter_keeps_the_kinds_params_for_the_kind_to_read") {
  const auto c = load_config_text("model:\n  drafter: {kind: dspark, num_layers: 2, markov_rank: 32}\n", "test.yaml");
  CHECK(c.model.drafter.kind == "dspark");
  CHECK(c.model.drafter.num_layers == 2);
  REQUIRE(c.model.drafter.params.IsMap());
  CHECK(c.model.drafter.params.size() == 1);
  CHECK(c.model.drafter.params["markov_rank"].as<int>() == 32);
  CHECK(c.model.drafter.kind_mark.file == "test.yaml");
  CHECK(c.model.drafter.kind_mark.line == 2);
  const auto again = load_config_text(dflow::config::to_yaml(c), "again.yaml");
  CHECK(again.model.drafter.kind == "dspark");
  CHECK(again.model.drafter.params["markov_rank"].as<int>() == 32);
  CHECK(dflow::config::to_yaml(again) == dflow::config::to_yaml(c));

  const auto set = load_config_text("{}", "test.yaml", {"model.drafter.kind=xpress", "model.drafter.xpress_rank=8"});
  CHECK(set.model.drafter.kind == "xpress");
  CHECK(set.model.drafter.params["xpress_rank"].as<int>() == 8);
  CHECK(dflow::config::Config{}.model.drafter.kind == "dflash");

  CHECK(error_of("model:\n  target: {pathh: x}\n").find("unknown key 'model.target.pathh'") != std::string::npos);
  // A copy of a config keeps its own params when the other's are replaced.
  auto copy = c;
  copy.model.drafter.params.reset(YAML::Node(YAML::NodeType::Map));
  CHECK(c.model.drafter.params.size() == 1);
}
