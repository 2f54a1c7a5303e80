// The drafter's kind and the drafter node's params in tests: a run config
// with the drafter node's params replaced, or model.drafter's kind and its
// params, and the refusal check every drafter kind's params test makes (a
// one-step run of each bad params fails with a message holding each
// expected piece: the key, the value, what to do).
#pragma once

#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "error_of.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

namespace dflow::testing {

inline config::Config with_drafter(config::Config config, const std::string& params) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load(params));
  return config;
}


// model.drafter's kind and its params from a YAML mapping ("{kind: dspark,
// markov_rank: 16}"), as a config file gives them beside the shape keys.
inline config::Config with_kind(config::Config config, const std::string& drafter) {
  const YAML::Node given = YAML::Load(drafter);
  YAML::Node params(YAML::NodeType::Map);
  for (auto it = given.begin(); it != given.end(); ++it) {
    if (it->first.Scalar() == "kind") config.model.drafter.kind = it->second.Scalar();
    else params.force_insert(it->first, it->second);
  }
  config.model.drafter.params.reset(params);  // reset: the other copies keep theirs
  return config;
}

struct RefusalCase {
  std::string params;             // the drafter node's params, as YAML
  std::vector<std::string> says;  // each must be in the error
  std::string drafter = "{}";     // model.drafter's kind and its params, as YAML (with_kind)
};

inline void check_refusals(const fs::path& dir, const std::vector<RefusalCase>& cases,
                           const std::vector<std::string>& overrides = {"run.max_steps=1", "eval.every_steps=0"}) {
  for (const auto& c : cases) {
    CAPTURE(c.params);
    CAPTURE(c.drafter);
    const std::string e =
        error_of([&] { nodes::run_training(with_kind(with_drafter(small_run_config(dir, overrides), c.params), c.drafter), {}); });
    for (const auto& s : c.says) CHECK_MESSAGE(e.find(s) != std::string::npos, e);
  }
}

}  // namespace dflow::testing
