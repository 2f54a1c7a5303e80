// `dflow compare`'s data: runs read from their own files (finished, still
// running, resumed), what differs in their configs, and which run wins.
#include <doctest/doctest.h>

#include <cmath>

#include "compare_runs.hpp"
#include "config/errors.hpp"
#include "fixture.hpp"
#include "report/compare.hpp"
#include "report/config_diff.hpp"

using namespace dflow::report;
namespace fs = std::filesystem;

namespace {

// 20 steps: 1 s each for 10 steps, then 0.5 s; 1000 real tokens each; loss 3 - 0.1 x step.
std::vector<nlohmann::json> finished_run_records() {
  std::vector<nlohmann::json> records{test::eval_record(0, 1.0)};
  for (int s = 1; s <= 20; ++s) {
    const double step_s = s <= 10 ? 1.0 : 0.5;
    const double elapsed = s <= 10 ? s : 10 + (s - 10) * 0.5;
    records.push_back(test::step_record(s, 3 - 0.1 * s, elapsed, step_s));
    if (s % 10 == 0) records.push_back(test::eval_record(s, s == 10 ? 3.0 : 2.5));
  }
  return records;
}

RunSummary summary(std::string name, double loss, double tau, double tokens_per_s) {
  RunSummary r;
  r.name = std::move(name);
  r.final_loss = loss;
  if (std::isfinite(tau)) r.best_tau = TauAt{tau, 10};
  r.recent.real_tokens_per_s = tokens_per_s;
  r.recent.steps_per_s = tokens_per_s / 1000;
  // Runs of one recipe but another lr: their losses and taus mean the same.
  r.config = RunConfig{r.name + "/config.yaml", {{"train.lr", r.name}, {"run.seed", "1"}}};
  return r;
}

}  // namespace

using test::eval_record;

TEST_CASE("Compare.ReadRun.AFinishedRunGivesFinalLossTauAndThroughput") {
  const fs::path dir = test::fresh_dir("compare-finished");
  test::write_metrics(dir, finished_run_records());
  const RunSummary run = read_run(dir, {.recent_steps = 5, .loss_tail = 10});
  CHECK(run.step_records == 20);
  CHECK(run.last_step == 20);
  CHECK(run.total_steps == 20);
  CHECK(run.wall_s == doctest::Approx(15));
  CHECK(run.final_loss == doctest::Approx(3 - 0.1 * 15.5));  // steps 11..20
  CHECK(run.whole_run.real_tokens_per_s == doctest::Approx(20000.0 / 15));
  CHECK(run.whole_run.steps_per_s == doctest::Approx(20.0 / 15));
  CHECK(run.recent.real_tokens_per_s == doctest::Approx(2000));  // steps 16..20: 0.5 s each
  CHECK(run.recent.steps_per_s == doctest::Approx(2));
  REQUIRE(run.best_tau);
  CHECK(run.best_tau->tau == 3.0);
  CHECK(run.best_tau->step == 10);
  REQUIRE(run.final_tau);
  CHECK(run.final_tau->tau == 2.5);
  CHECK(run.final_tau->step == 20);
  REQUIRE(run.tau.size() == 3);
  CHECK(run.tau[0].wall_s == 0);  // the untrained baseline
  CHECK(run.tau[1].wall_s == doctest::Approx(10));
  CHECK(run.loss.size() == 20);
  CHECK(run.loss[14].wall_s == doctest::Approx(12.5));
  CHECK_FALSE(run.config);
  CHECK(run.warnings.empty());
}

TEST_CASE("Compare.ReadRun.AStillRunningRunSkipsItsHalfWrittenLastLine") {
  const fs::path dir = test::fresh_dir("compare-running");
  auto records = finished_run_records();
  records.resize(8);
  test::write_metrics(dir, records, R"({"kind": "step", "global_step": 8, "loss": 2.)");
  const RunSummary run = read_run(dir);
  CHECK(run.last_step == 7);
  CHECK(run.loss.size() == 7);
  REQUIRE(run.warnings.size() == 1);
  CHECK(run.warnings[0].find("truncated last line") != std::string::npos);
}

TEST_CASE("Compare.ReadRun.AResumedRunHasEachStepOnceAndItsWallTimeAdds") {
  // The first process ran steps 1..6 (1 s each) and saved a checkpoint at 4;
  // the resumed one took 5 s to its first step (5), then 1 s a step. Steps 5
  // and 6 and the evaluation at 4 appear twice: the later records count.
  const fs::path dir = test::fresh_dir("compare-resumed");
  std::vector<nlohmann::json> records;
  for (int s = 1; s <= 6; ++s) records.push_back(test::step_record(s, 10.0 + s, s, 1.0));
  records.push_back(eval_record(4, 1.5));
  records.push_back(eval_record(4, 2.0));
  for (int s = 5; s <= 8; ++s) records.push_back(test::step_record(s, 1.0 * s, s, s == 5 ? 5.0 : 1.0));
  test::write_metrics(dir, records);
  const RunSummary run = read_run(dir, {.recent_steps = 3, .loss_tail = 2});
  CHECK(run.step_records == 8);
  REQUIRE(run.loss.size() == 8);
  for (size_t i = 0; i < run.loss.size(); ++i) CHECK(run.loss[i].step == static_cast<int64_t>(i + 1));
  CHECK(run.loss[4].value == 5.0);  // the resumed process's step 5
  CHECK(run.loss[3].wall_s == doctest::Approx(4));
  CHECK(run.loss[4].wall_s == doctest::Approx(4 + 5));
  CHECK(run.loss[7].wall_s == doctest::Approx(4 + 8));
  CHECK(run.wall_s == doctest::Approx(12));
  CHECK(run.final_loss == doctest::Approx(7.5));
  CHECK(run.recent.steps_per_s == doctest::Approx(1));
  REQUIRE(run.tau.size() == 1);
  CHECK(run.tau[0].value == 2.0);
  CHECK(run.tau[0].wall_s == doctest::Approx(4));
}

TEST_CASE("Compare.ReadRun.ADirectoryThatIsNoRunIsRefusedNamingIt") {
  const fs::path dir = test::fresh_dir("compare-not-a-run");
  const std::string message = dir.string() + ": not a dflow run directory (no metrics.jsonl)";
  CHECK_THROWS_WITH_AS(read_run(dir), doctest::Contains(message.c_str()), dflow::ConfigError);
}

TEST_CASE("Compare.Config.PipelineNodesByNameWithTypeAndParams") {
  const FlatConfig flat = flatten_config(test::config_yaml("runs/a", "0.02", "pad_bucket.token_budget", 1));
  CHECK(flat.at("train.lr") == "0.02");
  CHECK(flat.at("data.buckets") == "[64, 128]");
  CHECK(flat.at("pipeline.nodes.pad.type") == "pad_bucket.token_budget");
  CHECK(flat.at("pipeline.nodes.pad.params.token_budget") == "2048");
  CHECK(flat.at("pipeline.nodes.target.replicas") == "1");  // not written: its default
  CHECK(flat.at("pipeline.edges.load->pad.capacity") == "8");
  CHECK(flat.count("pipeline.nodes") == 0);
  CHECK_THROWS_AS(flatten_config("train: {lr: [1,"), std::runtime_error);
}

TEST_CASE("Compare.Config.OnlyTheKeysThatDifferAreShown") {
  const FlatConfig a = flatten_config(test::config_yaml("runs/a", "0.02", "pad_bucket.token_budget", 1));
  const FlatConfig b = flatten_config(test::config_yaml("runs/b", "0.1", "pad_bucket.fixed_batch", 2));
  const auto diff = diff_configs({&a, &b, nullptr});
  REQUIRE(diff.size() == 3);  // run.out_dir always differs and is left out
  CHECK(diff[0].key == "pipeline.nodes.pad.type");
  CHECK(diff[0].values == std::vector<std::string>{"pad_bucket.token_budget", "pad_bucket.fixed_batch", "?"});
  CHECK(diff[1].key == "pipeline.nodes.target.replicas");
  CHECK(diff[1].values == std::vector<std::string>{"1", "2", "?"});
  CHECK(diff[2].key == "train.lr");
  CHECK(diff[2].values == std::vector<std::string>{"0.02", "0.1", "?"});
  FlatConfig c = a;
  c["train.new_key"] = "true";
  const auto added = diff_configs({&a, &c});
  REQUIRE(added.size() == 1);
  CHECK(added[0].values == std::vector<std::string>{"(absent)", "true"});
  CHECK(diff_configs({&a, nullptr}).empty());  // one config: nothing to compare it with
  CHECK(diff_configs({&a, &a}).empty());
}

TEST_CASE("Compare.Config.TheNewestCheckpointHoldsTheRunsConfig") {
  const fs::path dir = test::fresh_dir("compare-config");
  CHECK_FALSE(read_run_config(dir));
  test::write_checkpoint_config(dir, "step-5", test::config_yaml("runs/a", "0.5", "pad_bucket.token_budget", 1));
  test::write_checkpoint_config(dir, "best-step-7", test::config_yaml("runs/a", "0.7", "pad_bucket.token_budget", 1));
  test::write_checkpoint_config(dir, "step-10", test::config_yaml("runs/a", "0.10", "pad_bucket.token_budget", 1));
  fs::create_directories(dir / "checkpoints" / "step-12");  // being written: no config yet
  std::ofstream(dir / "checkpoints" / "latest") << "step-10\n";
  const auto config = read_run_config(dir);
  REQUIRE(config);
  CHECK(config->file == dir / "checkpoints" / "step-10" / "config.yaml");
  CHECK(config->values.at("train.lr") == "0.10");
}

TEST_CASE("Compare.Winners.LowestLossHighestTauHighestThroughput") {
  const std::vector<RunSummary> runs{summary("a", 1.5, 3.0, 900), summary("b", 1.2, 3.0, 1200), summary("c", kUnknownValue, kUnknownValue, 1000)};
  const auto winners = pick_winners(runs, {.recent_steps = 50, .loss_tail = 10});
  REQUIRE(winners.size() == 4);
  CHECK(winners[0].metric == "lowest final loss (mean of last 10 steps)");
  CHECK(winners[0].runs == std::vector<size_t>{1});
  CHECK(winners[0].value == 1.2);
  CHECK(winners[1].runs.empty());  // a tie names none
  CHECK(winners[1].no_clear_winner == "a 3 and b 3 tie");
  CHECK(winners[2].runs == std::vector<size_t>{1});
  CHECK(winners[2].values[2] == 1000);
  CHECK(winners[3].runs == std::vector<size_t>{1});
  const auto none = pick_winners({summary("a", kUnknownValue, kUnknownValue, kUnknownValue)});
  CHECK(none[0].runs.empty());
}

TEST_CASE("Compare.Names.RunsAreNamedByDirectoryUnlessTwoShareOne") {
  std::vector<RunSummary> runs(3);
  runs[0].run_dir = "sweep/lr-0.1/run";
  runs[1].run_dir = "sweep/lr-0.2/run";
  runs[2].run_dir = "runs/baseline/";
  name_runs(runs);
  CHECK(runs[0].name == "sweep/lr-0.1/run");
  CHECK(runs[1].name == "sweep/lr-0.2/run");
  CHECK(runs[2].name == "baseline");
}

TEST_CASE("Compare.Notes.RunsAtDifferentStepsAndRunsWithoutConfigAreNoted") {
  std::vector<RunSummary> runs(2);
  runs[0].run_dir = "a";
  runs[0].last_step = 40;
  runs[0].config = RunConfig{"a/checkpoints/step-40/config.yaml", {{"train.lr", "0.1"}}};
  runs[1].run_dir = "b";
  runs[1].last_step = 25;
  const Comparison c = compare(runs);
  REQUIRE(c.notes.size() == 2);
  CHECK(c.notes[0].find("different steps (a 40, b 25)") != std::string::npos);
  CHECK(c.notes[1].find("no resolved config in b") != std::string::npos);
  CHECK(c.config_diff.empty());
}
