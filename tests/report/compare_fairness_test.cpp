// `dflow compare` names a winner only where a metric means the same in every
// run, and groups runs that differ only in seed instead of ranking them.
#include <doctest/doctest.h>

#include <cmath>

#include "report/compare.hpp"
#include "report/compare_fairness.hpp"
#include "report/compare_render.hpp"
#include "report/compare_variants.hpp"

using namespace dflow::report;

namespace {

// A run of `lr` (and `extra` keys) with seed `seed`, named as dflow sweep names it.
RunSummary run(const std::string& name, const std::string& seed, double loss, double best_tau,
               FlatConfig extra = {}, std::vector<CurvePoint> tau = {}) {
  RunSummary r;
  r.name = name;
  r.run_dir = name;
  r.final_loss = loss;
  if (std::isfinite(best_tau)) r.best_tau = TauAt{best_tau, 10};
  r.tau = std::move(tau);
  r.recent.real_tokens_per_s = 1000;
  r.whole_run.real_tokens_per_s = 1000;
  FlatConfig config{{"run.seed", seed}, {"run.name", name}, {"run.out_dir", "sweep/" + name},
                    {"model.drafter.block_size", "16"}, {"train.loss_decay_gamma", "7"},
                    {"pipeline.nodes.drafter.type", "drafter_step"}, {"pipeline.nodes.eval.type", "eval.tau"},
                    {"eval.prompts", "heldout.jsonl"}, {"eval.temperature", "0"}, {"eval.max_new_tokens", "48"},
                    {"eval.max_prompts", "16"}, {"model.target.path", "target"}};
  for (const auto& [k, v] : extra) config[k] = v;
  r.config = RunConfig{name + "/config.yaml", config};
  return r;
}

const Winner& winner(const Comparison& c, const std::string& metric_start) {
  for (const auto& w : c.winners)
    if (w.metric.rfind(metric_start, 0) == 0) return w;
  FAIL("no metric " << metric_start);
  return c.winners.front();
}

}  // namespace

TEST_CASE("Compare.Fair.LossIsRankedOnlyUnderOneObjective") {
  const auto same = compare({run("decay", "1", 2.0, 5), run("lr-high", "1", 1.5, 6, {{"train.lr", "0.1"}})});
  CHECK(winner(same, "lowest final loss").runs == std::vector<size_t>{1});
  CHECK(winner(same, "lowest final loss").no_winner.empty());

  // D-PACE weights positions otherwise: its loss is not the decay run's.
  const auto dpace = compare({run("decay", "1", 2.0, 5), run("dpace", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.objective", "dpace"}})});
  const Winner& loss = winner(dpace, "lowest final loss");
  CHECK(loss.runs.empty());
  CHECK(loss.no_winner == "pipeline.nodes.drafter.params.objective is (absent) in decay and dpace in dpace");
  CHECK(winner_line(dpace, loss).find("no winner: pipeline.nodes.drafter.params.objective") != std::string::npos);
  CHECK(winner(dpace, "highest best tau").runs == std::vector<size_t>{1});  // tau still means the same
  CHECK(winner(dpace, "highest throughput").no_winner.empty());

  // Every key that differs is said.
  const auto both = compare({run("decay", "1", 2.0, 5), run("dpace", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.objective", "dpace"},
                                                                                  {"pipeline.nodes.drafter.params.alpha", "0.5"}})});
  CHECK(winner(both, "lowest final loss").no_winner ==
        "pipeline.nodes.drafter.params.alpha is (absent) in decay and 0.5 in dpace; "
        "pipeline.nodes.drafter.params.objective is (absent) in decay and dpace in dpace");
  const auto gamma = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"train.loss_decay_gamma", "4"}})});
  CHECK(winner(gamma, "lowest final loss").no_winner == "train.loss_decay_gamma is 7 in a and 4 in b");
  const auto block = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"model.drafter.block_size", "8"}})});
  CHECK(winner(block, "lowest final loss").no_winner == "model.drafter.block_size is 16 in a and 8 in b");
  // How the loss is computed (recomputing activations) is no difference in what it means.
  const auto recompute = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.recompute", "true"}})});
  CHECK(winner(recompute, "lowest final loss").runs == std::vector<size_t>{1});
}

TEST_CASE("Compare.Fair.TauIsRankedOnlyOnTheSamePromptsTemperatureAndBudget") {
  const auto temperature = compare({run("greedy", "1", 2.0, 5), run("sampled", "1", 2.0, 6, {{"eval.temperature", "1"}})});
  CHECK(winner(temperature, "highest best tau").runs.empty());
  CHECK(winner(temperature, "highest best tau").no_winner == "eval.temperature is 0 in greedy and 1 in sampled");
  const auto budget = compare({run("a", "1", 2.0, 5), run("b", "1", 2.0, 6, {{"pipeline.nodes.eval.params.max_new_tokens", "64"}})});
  CHECK(winner(budget, "highest best tau").no_winner == "eval.max_new_tokens is 48 in a and 64 in b");
  const auto prompts = compare({run("a", "1", 2.0, 5), run("b", "1", 2.0, 6, {{"eval.prompts", "other.jsonl"}})});
  CHECK(winner(prompts, "highest best tau").no_winner == "eval.prompts is heldout.jsonl in a and other.jsonl in b");
  // A run without config yet: what its figures mean is unknown.
  RunSummary bare;
  bare.run_dir = "bare";
  bare.final_loss = 1.0;
  const auto unknown = compare({run("a", "1", 2.0, 5), bare});
  CHECK(winner(unknown, "lowest final loss").no_winner.find("bare has no resolved config yet") == 0);
}

TEST_CASE("Compare.Variants.SeedsAreGroupedAndRankedByTheirMean") {
  const std::vector<CurvePoint> fast{{10, 5.0, 4.0}, {20, 10.0, 12.0}}, slow{{10, 5.0, 2.0}, {20, 10.0, 9.0}};
  std::vector<RunSummary> runs{
      run("lr=0.1+seed=1", "1", 1.0, 12, {{"train.lr", "0.1"}}, fast), run("lr=0.1+seed=2", "2", 3.0, 12, {{"train.lr", "0.1"}}, fast),
      run("lr=0.2+seed=1", "1", 1.5, 9, {{"train.lr", "0.2"}}, slow), run("lr=0.2+seed=2", "2", 1.7, 9, {{"train.lr", "0.2"}}, slow)};
  const auto c = compare(runs);
  REQUIRE(c.variants.size() == 2);
  CHECK(c.variants[0].name == "lr=0.1");
  CHECK(c.variants[0].runs == std::vector<size_t>{0, 1});
  CHECK(c.variants[0].seeds == std::vector<std::string>{"1", "2"});
  // Means: lr=0.1 2.0, lr=0.2 1.6: the lower mean wins, though lr=0.1's seed 1 is the lowest run.
  const Winner& loss = winner(c, "lowest final loss");
  CHECK(loss.runs == std::vector<size_t>{2, 3});
  CHECK(loss.value == doctest::Approx(1.6));
  CHECK(winner_line(c, loss) == "lowest final loss (mean of last 10 steps): lr=0.2 (mean of 2 seeds) 1.6; "
                               "lr=0.1 (mean of 2 seeds) 2");
  const auto figures = variant_figures(c);
  CHECK(figures[0].final_loss.mean == doctest::Approx(2.0));
  CHECK(figures[0].final_loss.sd == doctest::Approx(std::sqrt(2.0)));
  CHECK(c.tau_steps == std::vector<int64_t>{10, 20});
  CHECK(c.tau_target == doctest::Approx(9.6));  // 0.8 x the best tau, 12
  CHECK(figures[0].reached_tau == 2);
  CHECK(figures[0].time_to_tau_s.mean == doctest::Approx(10.0));
  CHECK(figures[1].reached_tau == 0);
  CHECK(figures[1].tau_at[0].mean == doctest::Approx(2.0));
  const auto rows = variant_rows(c);
  REQUIRE_FALSE(rows.empty());
  CHECK(rows[0].cells == std::vector<std::string>{"1 2", "1 2"});
  CHECK(compare_table(c).find("variants (runs that differ only in seed, grouped: mean ± sd)") != std::string::npos);
  // Runs that differ only in seed are one variant: nothing to rank.
  const auto seeds_only = compare({runs[0], runs[1]});
  REQUIRE(seeds_only.variants.size() == 1);
  CHECK(winner(seeds_only, "lowest final loss").runs == std::vector<size_t>{0, 1});
  // Each run alone when none share a variant: no variants table.
  CHECK(variant_rows(compare({runs[0], runs[2]})).empty());
}

TEST_CASE("Compare.Variants.CommonTauStepsAreEvenlySpreadAndEndAtTheLast") {
  std::vector<CurvePoint> many;
  for (int s = 2; s <= 40; s += 2) many.push_back({s, 0, 1});
  RunSummary a, b;
  a.tau = many;
  b.tau = {many.begin() + 1, many.end()};  // from step 4
  CHECK(common_tau_steps({a, b}, 4) == std::vector<int64_t>{10, 20, 30, 40});
  CHECK(common_tau_steps({a}, 0).empty());
  CHECK(spread_of({1.0, NAN, 3.0}).n == 2);
  CHECK(spread_text(spread_of({1.0, 3.0})) == "2.000 ± 1.4");
}
