// The objective's position weighting is the drafter node's choice:
// `params: {objective: dpace, alpha: 0.5}` trains under D-PACE, resumes
// exactly, and a resume under another weighting, or a bad alpha, is refused
// naming the node.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "config/errors.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;

namespace {

config::Config with_objective(config::Config config, const std::string& objective, double alpha = 0.5) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") {
      n.params["objective"] = objective;
      n.params["alpha"] = alpha;
    }
  return config;
}

std::vector<double> losses(const std::vector<nlohmann::json>& records) {
  std::vector<double> out;
  for (const auto& r : records) out.push_back(r["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("Train.Objective.dpace_trains_resumes_exactly_and_is_kept_on_resume") {
  const std::vector<std::string> short_run{"train.epochs=1", "eval.every_steps=0"};
  const auto decay_dir = fresh_dir("objective-decay"), dpace_dir = fresh_dir("objective-dpace");
  nodes::run_training(stopped_after(small_run_config(decay_dir, short_run), 6), {});
  nodes::run_training(stopped_after(with_objective(small_run_config(dpace_dir, short_run), "dpace"), 6), {});
  const auto decay = losses(step_records(decay_dir)), dpace = losses(step_records(dpace_dir));
  REQUIRE(dpace.size() == 6);
  for (const double loss : dpace) CHECK(std::isfinite(loss));
  CHECK(dpace != decay);  // another weighting of the same batches

  // Resumed under D-PACE: the records are those of an uninterrupted run.
  const auto split = fresh_dir("objective-dpace-split");
  nodes::run_training(stopped_after(with_objective(small_run_config(split, short_run), "dpace"), 3), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  CHECK_THROWS_WITH_AS(nodes::run_training(stopped_after(small_run_config(split, short_run), 6), resume),
                       doctest::Contains("pipeline.nodes.drafter: drafter_step {objective: dpace} -> drafter_step "
                                         "(params.objective: dpace -> its default)"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(
      nodes::run_training(stopped_after(with_objective(small_run_config(split, short_run), "dpace", 0.25), 6), resume),
      doctest::Contains("{objective: dpace} -> drafter_step {objective: dpace, alpha: 0.25} "
                        "(params.alpha: its default -> 0.25)"),
      ConfigError);
  nodes::run_training(stopped_after(with_objective(small_run_config(split, short_run), "dpace"), 6), resume);
  CHECK(step_records(split) == step_records(dpace_dir));
}

TEST_CASE("Train.Objective.bad_params_are_refused_naming_the_node") {
  const auto dir = fresh_dir("objective-bad");
  auto config = with_objective(small_run_config(dir), "dpace", 0.0);
  CHECK_THROWS_WITH_AS(nodes::run_training(config, {}), doctest::Contains("params.alpha: must lie in (0, 1]"), ConfigError);
  config = with_objective(small_run_config(dir), "d-pace");
  CHECK_THROWS_WITH_AS(nodes::run_training(config, {}), doctest::Contains("did you mean 'dpace'"), ConfigError);
}

namespace {

config::Config with_recompute(config::Config config, bool recompute) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params["recompute"] = recompute;
  return config;
}

}  // namespace

TEST_CASE("Train.Objective.recompute_trains_the_same_and_a_resume_may_change_it") {
  // Recomputing activations changes no math: the same losses step by step
  // (float32, so up to the order gradients are summed in), and a run started
  // without it resumes with it.
  const std::vector<std::string> short_run{"train.epochs=1", "eval.every_steps=0"};
  const auto kept_dir = fresh_dir("recompute-off"), recomputed_dir = fresh_dir("recompute-on");
  nodes::run_training(stopped_after(small_run_config(kept_dir, short_run), 4), {});
  nodes::run_training(stopped_after(with_recompute(small_run_config(recomputed_dir, short_run), true), 4), {});
  const auto kept = losses(step_records(kept_dir)), recomputed = losses(step_records(recomputed_dir));
  REQUIRE(recomputed.size() == 4);
  for (size_t i = 0; i < kept.size(); ++i) CHECK(recomputed[i] == doctest::Approx(kept[i]).epsilon(1e-5));

  const auto split = fresh_dir("recompute-split");
  nodes::run_training(stopped_after(small_run_config(split, short_run), 2), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(stopped_after(with_recompute(small_run_config(split, short_run), true), 4), resume);
  const auto resumed = losses(step_records(split));
  REQUIRE(resumed.size() == 4);
  for (size_t i = 0; i < kept.size(); ++i) CHECK(resumed[i] == doctest::Approx(kept[i]).epsilon(1e-5));
}
