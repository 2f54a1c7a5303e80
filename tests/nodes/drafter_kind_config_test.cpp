// model.drafter.kind and the kind's params beside it, as a config file gives
// them (nodes/drafter_kind_choice.hpp): read once into what the run builds,
// each bad key refused naming model.drafter.<key> and its line; the drafter
// node refuses the spelling of an earlier dflow naming the new key and value;
// a config saved by that dflow is read with its keys moved.
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "config/config.hpp"
#include "config/config_keys.hpp"
#include "config/errors.hpp"
#include "graph/description.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/registry.hpp"

using namespace dflow;

namespace {

config::Config load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return config::load_config_text(yaml, "kind.yaml", overrides);
}

// The ConfigError reading the kind's params throws ("" when none).
std::string kind_error(const config::Config& config) {
  try {
    (void)nodes::read_kind_config(config);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

}  // namespace

TEST_CASE("DrafterKindConfig.the_kind_and_its_params_are_read_from_model_drafter") {
  const auto config = load("model:\n  drafter: {kind: dspark, num_layers: 2, markov_rank: 32, markov_head: gated}\n");
  const auto kind = nodes::read_kind_config(config);
  CHECK(kind.kind == "dspark");
  CHECK(kind.params.at("markov_rank") == 32);
  CHECK(kind.params.at("markov_head") == "gated");
  CHECK(nodes::kind_resume_text(kind) == "{markov_rank: 32, markov_head: gated}");
  std::string teacher;
  const auto choice = nodes::drafter_kind_choice(config, nodes::default_registry(), &teacher);
  CHECK(choice.kind == "dspark");
  CHECK(choice.objective.kind_options == kind.params);
  CHECK(choice.fields.at("markov_rank") == 32);
  // The default: plain DFlash, no params.
  const auto plain = nodes::read_kind_config(load("{}"));
  CHECK(plain.kind == "dflash");
  CHECK(plain.params.empty());
  CHECK(nodes::kind_resume_text(plain).empty());
}

TEST_CASE("DrafterKindConfig.bad_keys_are_refused_naming_the_key_and_its_line") {
  struct Case {
    std::string yaml;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases{
      {"model:\n  drafter: {kind: dsprak}\n",
       {"kind.yaml:2:", "model.drafter.kind", "unknown drafter kind 'dsprak' is not one of: dflash, dflash2, dspark",
        "did you mean 'dspark'"}},
      {"model:\n  drafter:\n    markov_rank: 8\n",
       {"kind.yaml:3:", "model.drafter.markov_rank", "is a param of kind dspark", "model.drafter.kind is dflash",
        "set model.drafter.kind: dspark, or leave markov_rank out"}},
      {"model:\n  drafter: {kind: xpress, markov_rank: 8}\n",
       {"model.drafter.markov_rank", "is a param of kind dspark", "model.drafter.kind is xpress"}},
      {"model:\n  drafter: {kind: dspark, markov_rank: 0}\n", {"kind.yaml:2:", "model.drafter.markov_rank", "got 0"}},
      {"model:\n  drafter: {kind: dspark, markov_rnak: 8}\n",
       {"unknown key 'model.drafter.markov_rnak', did you mean 'model.drafter.markov_rank'?"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.yaml);
    const std::string e = kind_error(load(c.yaml));
    for (const auto& piece : c.says) CHECK_MESSAGE(has(e, piece), e);
  }
  // A typo of any of model.drafter's own keys is the kind reader's to refuse
  // (the config keeps unknown keys of the section for it), with the suggestion.
  for (const auto& k : config::config_keys().keys()) {
    if (k.section() != "model.drafter") continue;
    CAPTURE(k.path);
    const std::string e = kind_error(load("{}", {k.path + "x=1"}));
    CHECK_MESSAGE(has(e, "did you mean '" + k.path + "'"), e);
    CHECK_MESSAGE(has(e, "--set " + k.path + "x=1"), e);
  }
}

TEST_CASE("DrafterKindConfig.the_drafter_node_refuses_the_kind_among_its_params_naming_the_new_keys") {
  for (const auto& [params, says] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"{head: dspark}", {"params.head", "set model.drafter.kind: dspark"}},
           {"{markov_rank: 16, loss: kl}",
            {"params.markov_rank", "set model.drafter.kind: dspark and model.drafter.markov_rank: 16"}},
       }) {
    CAPTURE(params);
    auto config = load("{}");
    for (auto& n : config.pipeline.nodes)
      if (n.name == "drafter") n.params.reset(YAML::Load(params));
    std::string e;
    try {
      (void)graph::describe(config.pipeline, nodes::default_registry());
    } catch (const ConfigError& error) {
      e = error.what();
    }
    for (const auto& piece : says) CHECK_MESSAGE(has(e, piece), e);
    CHECK_MESSAGE(has(e, "(node 'drafter', drafter_step)"), e);
  }
}

TEST_CASE("DrafterKindConfig.a_saved_config_of_an_earlier_dflow_is_read_with_its_kind_moved") {
  auto saved = load("model:\n  drafter: {num_layers: 2}\n");
  for (auto& n : saved.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load("{head: dspark, markov_rank: 16, loss: kl, recompute: true}"));
  const config::Config before = saved;  // a copy: moving must not rewrite it
  const std::string moved = nodes::move_node_kind_params(saved, nodes::default_registry());
  CHECK(moved == "head -> model.drafter.kind, markov_rank -> model.drafter.markov_rank");
  CHECK(saved.model.drafter.kind == "dspark");
  CHECK(saved.model.drafter.params["markov_rank"].as<int>() == 16);
  for (const auto& n : saved.pipeline.nodes)
    if (n.name == "drafter") {
      CHECK_FALSE(n.params["head"]);
      CHECK_FALSE(n.params["markov_rank"]);
      CHECK(n.params["loss"].as<std::string>() == "kl");
      CHECK(n.params["recompute"].as<bool>());
    }
  (void)graph::describe(saved.pipeline, nodes::default_registry());  // the node takes what is left
  CHECK(nodes::read_kind_config(saved).params.at("markov_rank") == 16);
  for (const auto& n : before.pipeline.nodes)
    if (n.name == "drafter") CHECK(n.params["head"].as<std::string>() == "dspark");
  CHECK(before.model.drafter.params.size() == 0);
  // A config of this dflow has nothing to move.
  auto current = load("model:\n  drafter: {kind: dspark}\n");
  CHECK(nodes::move_node_kind_params(current, nodes::default_registry()).empty());
}

TEST_CASE("DrafterKindConfig.the_reference_lists_every_kinds_params_as_model_drafter_keys") {
  const std::string page = nodes::kind_reference_markdown();
  CHECK(has(page, "## Drafter kinds"));
  CHECK(has(page, "| `model.drafter.markov_rank` | dspark | integer | `256` | must match |"));
  CHECK(has(page, "| `model.drafter.xpress_rank` | xpress |"));
  for (const auto& d : nodes::kind_param_docs()) CHECK(d.name.rfind("model.drafter.", 0) == 0);
}
