// The resume check follows each key's declaration: a changed key is refused
// unless it is declared `may change` (config/config_keys.cpp).
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "config/config.hpp"
#include "config/config_keys.hpp"
#include "train/checkpoint.hpp"

using namespace dflow;

namespace {
YAML::Node node_at(YAML::Node root, const std::string& path) {
  std::vector<YAML::Node> chain{root};
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) chain.push_back(chain.back()[part]);
  return chain.back();
}

// Another valid-looking value of the same type.
YAML::Node changed(const YAML::Node& value, const std::string& type) {
  if (value.IsSequence()) {
    YAML::Node out = YAML::Clone(value);
    out.push_back(type.find("string") != std::string::npos ? YAML::Node("extra") : YAML::Node(4096));
    return out;
  }
  const std::string s = value.Scalar();
  if (type == "boolean") return YAML::Node(s == "true" ? "false" : "true");
  if (type == "string") return YAML::Node(s + "-other");
  if (type == "number") return YAML::Node(std::stod(s) * 0.5 + 0.125);
  return YAML::Node(std::stoll(s) + 1);
}
}  // namespace

TEST_CASE("Resume.each_declared_key_is_refused_or_allowed_as_declared") {
  const std::string saved = config::to_yaml(config::load_config(""));
  int must_match = 0, may_change = 0;
  for (const auto& k : config::config_keys().keys()) {
    CAPTURE(k.path);
    YAML::Node current = YAML::Load(saved);
    YAML::Node value = node_at(current, k.path);
    REQUIRE(value.IsDefined());
    value = changed(YAML::Clone(value), k.type);
    YAML::Emitter e;
    e << current;
    const auto differences = train::incompatible_config_keys(saved, e.c_str());
    if (k.on_resume == config::OnResume::must_match) {
      ++must_match;
      REQUIRE(differences.size() == 1);
      CHECK(differences[0].rfind(k.path + ": ", 0) == 0);
    } else {
      ++may_change;
      CHECK(differences.empty());
    }
  }
  CHECK(must_match > 0);
  CHECK(may_change > 0);
}

TEST_CASE("Resume.a_key_an_older_checkpoint_lacks_counts_as_its_default") {
  const std::string current = config::to_yaml(config::load_config(""));
  YAML::Node older = YAML::Load(current);
  older["train"].remove("adam_eps");  // as if written before the key existed
  YAML::Emitter e;
  e << older;
  CHECK(train::incompatible_config_keys(e.c_str(), current).empty());
  const std::string other = config::to_yaml(config::load_config("", {"train.adam_eps=0.001"}));
  const auto differences = train::incompatible_config_keys(e.c_str(), other);
  REQUIRE(differences.size() == 1);
  CHECK(differences[0] == "train.adam_eps: 1e-08 -> 0.001");
}
