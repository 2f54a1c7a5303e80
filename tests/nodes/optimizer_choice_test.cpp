// The optimizer is the optimizer node's type: optimizer_step.muon trains,
// checkpoints and resumes exactly, and a resume under another optimizer (or
// other Muon params), or a bad param, is refused naming the node.
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

config::Config with_muon(config::Config config, double lr = 0.02) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "optimizer") {
      n.type = "optimizer_step.muon";
      n.params["lr"] = lr;
    }
  return config;
}

}  // namespace

TEST_CASE("Train.Optimizer.muon_trains_resumes_exactly_and_is_kept_on_resume") {
  const std::vector<std::string> short_run{"train.epochs=1", "eval.every_steps=0", "checkpoint.every_steps=3"};
  const auto adamw_dir = fresh_dir("optimizer-adamw"), muon_dir = fresh_dir("optimizer-muon");
  nodes::run_training(stopped_after(small_run_config(adamw_dir, short_run), 6), {});
  nodes::run_training(stopped_after(with_muon(small_run_config(muon_dir, short_run)), 6), {});
  const auto adamw = step_records(adamw_dir), muon = step_records(muon_dir);
  REQUIRE(muon.size() == 6);
  for (const auto& r : muon) CHECK(std::isfinite(r["loss"].get<double>()));
  CHECK(muon[1]["loss"] != adamw[1]["loss"]);  // another update after step 1
  CHECK(muon[0]["loss"] == adamw[0]["loss"]);  // the same start

  const auto split = fresh_dir("optimizer-muon-split");
  nodes::run_training(stopped_after(with_muon(small_run_config(split, short_run)), 3), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  CHECK_THROWS_WITH_AS(nodes::run_training(stopped_after(small_run_config(split, short_run), 6), resume),
                       doctest::Contains("pipeline.nodes.optimizer: optimizer_step.muon -> optimizer_step"), ConfigError);
  CHECK_THROWS_WITH_AS(nodes::run_training(stopped_after(with_muon(small_run_config(split, short_run), 0.01), 6), resume),
                       doctest::Contains("optimizer_step.muon -> optimizer_step.muon {lr: 0.01} (params.lr: its default -> 0.01)"),
                       ConfigError);
  nodes::run_training(stopped_after(with_muon(small_run_config(split, short_run)), 6), resume);
  CHECK(step_records(split) == step_records(muon_dir));
}

TEST_CASE("Train.Optimizer.bad_muon_params_are_refused_naming_the_node") {
  const auto dir = fresh_dir("optimizer-bad");
  CHECK_THROWS_WITH_AS(nodes::run_training(with_muon(small_run_config(dir), 0.0), {}),
                       doctest::Contains("params.lr: must be > 0"), ConfigError);
}
