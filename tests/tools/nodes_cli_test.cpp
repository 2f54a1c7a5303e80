// `dflow nodes [TYPE...]`: every registered node kind with its ports, its
// params (type, default, allowed values) and what it needs of a run, read
// from the registrations; an unknown type is refused naming the known ones.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "config/errors.hpp"
#include "nodes/registry.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(testing::dflow_binary() + " " + args, 60);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What a kind's check_params itself says of `params` (YAML): "" when it
// refuses nothing (the graph's builder then refuses the keys it left unread).
std::string check_error(const graph::NodeSpec& spec, const std::string& params) {
  config::YamlSection section(YAML::Load(params), "params", std::make_shared<config::Origins>());
  try {
    spec.check_params(section);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Cli.Nodes.lists_every_registered_kind") {
  const auto o = run_dflow("nodes");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const auto& registry = nodes::default_registry();
  for (const auto& type : registry.types()) {
    CAPTURE(type);
    CHECK(has("\n" + o.output, "\n" + type + ": " + registry.find(type)->description + "\n"));
  }
}

TEST_CASE("Cli.Nodes.a_kind_shows_its_ports_params_and_needs") {
  SUBCASE("params with their type, default, allowed values, condition and resume rule") {
    const auto o = run_dflow("nodes features.engine");
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK(o.output.starts_with("features.engine: "));
    CHECK(has(o.output, "  inputs:  in (PaddedBatch)\n  outputs: out (FeatureBatch)\n"));
    CHECK(has(o.output, "    dtype (string; default bfloat16; one of: bfloat16, float16, float32, float8_e4m3fn): the "
                        "dtype the "));
    CHECK(has(o.output, "    on_mismatch (string; default fail; one of: fail, skip; a resume may change it): "));
    CHECK(has(o.output, "    max_skipped_fraction (number; default 0.01; only with on_mismatch: skip; a resume may "
                        "change it): "));
    CHECK(has(o.output, "  gives:   the teacher (the target's last hidden state) when a run needs it\n"));
    CHECK_FALSE(has(o.output, "drafter_step"));  // that kind only
  }
  SUBCASE("what a kind needs, with the param value that makes it need it") {
    const auto o = run_dflow("nodes drafter_step features.cached target_forward");
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK(has(o.output, "  needs:   the teacher (the target's last hidden state with every batch) when loss: js, "
                        "kl, lk_hybrid, neg_log_acceptance, reverse_kl or tv\n"));
    CHECK(has(o.output, "    loss (string, or a mapping of losses to weights; default ce; one of: ce, js, kl, "
                        "lk_hybrid, neg_log_acceptance, reverse_kl, tv): "));
    // The drafter kind and its params are model.drafter's (dflow config --reference lists them), not the node's.
    CHECK(has(o.output, "the drafter kind and its params are model.drafter's"));
    CHECK_FALSE(has(o.output, "markov_rank"));
    CHECK_FALSE(has(o.output, "    head ("));
    CHECK(has(o.output, "  needs:   the whole target in-process when fill: true: "));
    CHECK(has(o.output, "  needs:   the whole target in-process: runs the target in-process\n"));
    CHECK(has(o.output, "its work is the compute that bounds a run"));
  }
  SUBCASE("a kind without params says so") {
    const auto o = run_dflow("nodes reorder");
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    CHECK(has(o.output, "  inputs:  in (any type, ordered)\n"));
    CHECK(has(o.output, "  params:  none\n"));
  }
}

TEST_CASE("Cli.Nodes.an_unknown_type_is_refused_naming_the_known_ones") {
  const auto o = run_dflow("nodes drafter_stp");
  INFO(o.output);
  CHECK(o.exit_code == 2);
  CHECK(has(o.output, "unknown node type 'drafter_stp', did you mean 'drafter_step'?"));
  for (const auto& type : nodes::default_registry().types()) CHECK(has(o.output, type));
}

// The listed params are the ones each kind reads: a typo of every listed key
// is refused suggesting that key, and a kind that lists none reads none.
TEST_CASE("Cli.Nodes.the_listed_params_are_the_ones_each_kind_reads") {
  const auto& registry = nodes::default_registry();
  for (const auto& type : registry.types()) {
    const graph::NodeSpec& spec = *registry.find(type);
    CAPTURE(type);
    if (!spec.check_params) {
      CHECK(spec.params.empty());
      continue;
    }
    if (spec.params.empty()) CHECK(check_error(spec, "{not_a_param: 1}").empty());
    for (const auto& p : spec.params) {
      CAPTURE(p.name);
      const std::string typo = "{" + p.name + "x: " + p.default_text + "}";
      CHECK(has(check_error(spec, typo), "did you mean 'params." + p.name + "'"));
    }
  }
}
