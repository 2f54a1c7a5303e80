// What `dflow compare` ranks runs on is what their node kinds say: the
// drafter node's objective with its defaults resolved, and the eval node's
// settings, never how a config happens to spell them.
#include <doctest/doctest.h>

#include <fstream>

#include "nodes/figure_terms.hpp"
#include "nodes/registry.hpp"
#include "train_fixture.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

// The terms of the default run with `sets`, saved as a checkpoint's config.yaml is.
report::FigureTerms terms_of(const std::string& name, const std::vector<std::string>& sets) {
  const fs::path dir = testing::fresh_dir("figure-terms-" + name);
  std::ofstream(dir / "config.yaml") << config::to_yaml(config::load_config("", sets));
  return nodes::figure_terms({dir / "config.yaml", {}}, nodes::default_registry());
}

}  // namespace

TEST_CASE("Nodes.FigureTerms.DefaultsResolvedAndOnlyWhatTheLossMeans") {
  const auto plain = terms_of("plain", {});
  CHECK(plain.unknown.empty());
  CHECK(plain.loss.at("pipeline.nodes.drafter.type") == "drafter_step");
  CHECK(plain.loss.at("pipeline.nodes.drafter.params.objective") == "decay");
  CHECK(plain.loss.at("train.loss_decay_gamma") == "7");
  CHECK_FALSE(plain.loss.count("pipeline.nodes.drafter.params.alpha"));  // D-PACE's only
  // The default written out, and a param that changes only how the loss is computed: the same terms.
  CHECK(terms_of("spelled", {"pipeline.nodes.drafter.params.objective=decay"}).loss == plain.loss);
  CHECK(terms_of("recompute", {"pipeline.nodes.drafter.params.recompute=true"}).loss == plain.loss);
  // D-PACE never weighs by the decay's gamma.
  const auto dpace = terms_of("dpace", {"pipeline.nodes.drafter.params.objective=dpace", "train.loss_decay_gamma=4"});
  CHECK(dpace.loss.at("pipeline.nodes.drafter.params.objective") == "dpace");
  CHECK(dpace.loss.at("pipeline.nodes.drafter.params.alpha") == "0.5");
  CHECK_FALSE(dpace.loss.count("train.loss_decay_gamma"));
  CHECK(terms_of("dpace-7", {"pipeline.nodes.drafter.params.objective=dpace"}).loss == dpace.loss);
}

TEST_CASE("Nodes.FigureTerms.TauIsTheEvalNodesSettingsAgainstTheTarget") {
  const auto plain = terms_of("tau-plain", {});
  CHECK(plain.tau.at("pipeline.nodes.eval.type") == "eval.tau");
  CHECK(plain.tau.at("model.target.path") == config::load_config("").model.target.path);
  // The node's own param and the eval section it defaults to say the same.
  const auto section = terms_of("tau-section", {"eval.max_new_tokens=32"});
  const auto own = terms_of("tau-own", {"pipeline.nodes.eval.params.max_new_tokens=32"});
  CHECK(section.tau.at("pipeline.nodes.eval.params.max_new_tokens") == "32");
  CHECK(own.tau == section.tau);
  CHECK(plain.tau != section.tau);
}

TEST_CASE("Nodes.FigureTerms.AConfigThatDoesNotLoadMakesThemUnknown") {
  const fs::path dir = testing::fresh_dir("figure-terms-bad");
  std::ofstream(dir / "config.yaml") << "train: {lr: abc}\n";
  const auto bad = nodes::figure_terms({dir / "config.yaml", {}}, nodes::default_registry());
  CHECK(bad.unknown.find("its config could not be read: ") == 0);
  CHECK(bad.loss.empty());
}
