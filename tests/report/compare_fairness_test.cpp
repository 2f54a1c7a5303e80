// `dflow compare` names a winner only where a metric means the same in every
// run, and groups runs that differ only in seed instead of ranking them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "config/errors.hpp"
#include "report/compare.hpp"
#include "report/compare_fairness.hpp"
#include "report/compare_render.hpp"
#include "report/compare_variants.hpp"

using namespace dflow::report;

namespace {

// What the node kinds say of a default run (nodes/figure_terms.hpp): its
// drafter's objective, resolved, and its evaluator's settings.
FigureTerms decay_terms() {
  return {{{"pipeline.nodes.drafter.type", "drafter_step"},
           {"pipeline.nodes.drafter.params.objective", "decay"},
           {"train.loss_decay_gamma", "7"}},
          {{"pipeline.nodes.eval.type", "eval.tau"},
           {"pipeline.nodes.eval.params.prompts", "heldout.jsonl"},
           {"pipeline.nodes.eval.params.temperature", "0"},
           {"pipeline.nodes.eval.params.max_new_tokens", "48"},
           {"pipeline.nodes.eval.params.max_prompts", "16"},
           {"model.target.path", "target"}},
          ""};
}

FigureTerms dpace_terms() {
  FigureTerms t = decay_terms();
  t.loss = {{"pipeline.nodes.drafter.type", "drafter_step"},
            {"pipeline.nodes.drafter.params.objective", "dpace"},
            {"pipeline.nodes.drafter.params.alpha", "0.5"}};
  return t;
}

// A run of `lr` (and `extra` keys) with seed `seed`, named as dflow sweep names it.
RunSummary run(const std::string& name, const std::string& seed, double loss, double best_tau,
               FlatConfig extra = {}, std::vector<CurvePoint> tau = {}, FigureTerms terms = decay_terms()) {
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
                    {"data.train", "train.jsonl"}, {"data.max_length", "512"},
                    {"pipeline.nodes.drafter.type", "drafter_step"}, {"pipeline.nodes.eval.type", "eval.tau"},
                    {"eval.prompts", "heldout.jsonl"}, {"eval.temperature", "0"}, {"eval.max_new_tokens", "48"},
                    {"eval.max_prompts", "16"}, {"model.target.path", "target"}};
  for (const auto& [k, v] : extra) config[k] = v;
  r.config = RunConfig{name + "/config.yaml", config};
  r.terms = std::move(terms);
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
  const FlatConfig dpace_config{{"pipeline.nodes.drafter.params.objective", "dpace"}};
  const auto dpace = compare({run("decay", "1", 2.0, 5), run("dpace", "1", 1.5, 6, dpace_config, {}, dpace_terms())});
  const Winner& loss = winner(dpace, "lowest final loss");
  CHECK(loss.runs.empty());
  // Every key that differs is said.
  CHECK(loss.no_winner ==
        "pipeline.nodes.drafter.params.alpha is (absent) in decay and 0.5 in dpace; "
        "pipeline.nodes.drafter.params.objective is decay in decay and dpace in dpace; "
        "train.loss_decay_gamma is 7 in decay and (absent) in dpace");
  CHECK(winner_line(dpace, loss).find("no winner: pipeline.nodes.drafter.params.alpha") != std::string::npos);
  CHECK(winner(dpace, "highest best tau").runs == std::vector<size_t>{1});  // tau still means the same
  CHECK(winner(dpace, "highest throughput").no_winner.empty());

  auto gamma_terms = decay_terms();
  gamma_terms.loss["train.loss_decay_gamma"] = '4';  // a char: GCC 12 warns wrongly on a 1-char literal (its bug 105329)
  const auto gamma = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"train.loss_decay_gamma", "4"}}, {}, gamma_terms)});
  CHECK(winner(gamma, "lowest final loss").no_winner == "train.loss_decay_gamma is 7 in a and 4 in b");
  const auto block = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"model.drafter.block_size", "8"}})});
  CHECK(winner(block, "lowest final loss").no_winner == "model.drafter.block_size is 16 in a and 8 in b");
  // How the loss is computed (recomputing activations) is no difference in
  // what it means: the node leaves it out of its terms.
  const auto recompute = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.recompute", "true"}})});
  CHECK(winner(recompute, "lowest final loss").runs == std::vector<size_t>{1});
}

TEST_CASE("Compare.Fair.LossIsRankedOnlyOnTheSameDataAndTarget") {
  const std::pair<const char*, const char*> differences[] = {
      {"data.train", "other.jsonl"}, {"data.max_length", "1024"}, {"model.target.path", "other-target"}};
  for (const auto& [key, value] : differences) {
    CAPTURE(key);
    const auto c = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{key, value}})});
    CHECK(winner(c, "lowest final loss").runs.empty());
    CHECK(winner(c, "lowest final loss").no_winner.find(std::string(key) + " is ") == 0);
  }
}

TEST_CASE("Compare.Fair.WhatTheNodesSayDecidesNotHowTheConfigSpellsIt") {
  // `objective: decay` written out is the default the other run has: the
  // configs differ, the nodes' terms do not, and the loss is ranked.
  const auto spelled = compare({run("a", "1", 2.0, 5), run("b", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.objective", "decay"}})});
  CHECK(spelled.config_diff.size() == 1);
  CHECK(winner(spelled, "lowest final loss").runs == std::vector<size_t>{1});
  // Two D-PACE runs never weigh by train.loss_decay_gamma: a different one does not stop ranking them.
  const auto dpace = compare({run("a", "1", 2.0, 5, {{"pipeline.nodes.drafter.params.objective", "dpace"}}, {}, dpace_terms()),
                              run("b", "1", 1.5, 6, {{"pipeline.nodes.drafter.params.objective", "dpace"}, {"train.loss_decay_gamma", "4"}},
                                  {}, dpace_terms())});
  CHECK(winner(dpace, "lowest final loss").runs == std::vector<size_t>{1});
  // Terms the nodes could not tell make the figures' meaning unknown, saying why.
  auto unreadable = run("b", "1", 1.5, 6, {{"train.lr", "0.1"}});
  unreadable.terms = {{}, {}, "its config could not be read: bad"};
  const auto unknown = compare({run("a", "1", 2.0, 5), unreadable});
  CHECK(winner(unknown, "lowest final loss").no_winner == "what the figures of b mean is unknown (b: its config could not be read: bad)");
}

TEST_CASE("Compare.Fair.TauIsRankedOnlyOnTheSamePromptsTemperatureAndBudget") {
  // A run whose eval node says another `key` (its config says so too).
  auto other = [](const std::string& name, const std::string& key, const std::string& value) {
    FigureTerms t = decay_terms();
    t.tau[key] = value;
    return run(name, "1", 2.0, 6, {{key, value}}, {}, t);
  };
  const auto temperature = compare({run("greedy", "1", 2.0, 5), other("sampled", "pipeline.nodes.eval.params.temperature", "1")});
  CHECK(winner(temperature, "highest best tau").runs.empty());
  CHECK(winner(temperature, "highest best tau").no_winner == "pipeline.nodes.eval.params.temperature is 0 in greedy and 1 in sampled");
  const auto budget = compare({run("a", "1", 2.0, 5), other("b", "pipeline.nodes.eval.params.max_new_tokens", "64")});
  CHECK(winner(budget, "highest best tau").no_winner == "pipeline.nodes.eval.params.max_new_tokens is 48 in a and 64 in b");
  const auto target = compare({run("a", "1", 2.0, 5), other("b", "model.target.path", "other")});
  CHECK(winner(target, "highest best tau").no_winner == "model.target.path is target in a and other in b");
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
      run("lr=0.1+seed=1", "1", 1.4, 12, {{"train.lr", "0.1"}}, fast), run("lr=0.1+seed=2", "2", 2.6, 12, {{"train.lr", "0.1"}}, fast),
      run("lr=0.2+seed=1", "1", 0.6, 9, {{"train.lr", "0.2"}}, slow), run("lr=0.2+seed=2", "2", 0.8, 9, {{"train.lr", "0.2"}}, slow)};
  const auto c = compare(runs, {.tau_target = 9.6});
  REQUIRE(c.variants.size() == 2);
  CHECK(c.variants[0].name == "lr=0.1");
  CHECK(c.variants[0].runs == std::vector<size_t>{0, 1});
  CHECK(c.variants[0].seeds == std::vector<std::string>{"1", "2"});
  // Means: lr=0.1 2.0, lr=0.2 0.7: a lead of 1.3, more than either's seeds' spread (1.2, 0.2).
  const Winner& loss = winner(c, "lowest final loss");
  CHECK(loss.runs == std::vector<size_t>{2, 3});
  CHECK(loss.value == doctest::Approx(0.7));
  CHECK(winner_line(c, loss) == "lowest final loss (mean of last 10 steps): lr=0.2 (mean of 2 seeds) 0.7, ahead of lr=0.1 "
                               "by 1.3, more than the seeds' spread 1.2; lr=0.1 (mean of 2 seeds) 2");
  CHECK(compare_table(c).find(kWinnerRule) != std::string::npos);  // the table says how it decides
  const auto figures = variant_figures(c);
  CHECK(figures[0].final_loss.mean == doctest::Approx(2.0));
  CHECK(figures[0].final_loss.sd == doctest::Approx(std::sqrt(0.72)));
  CHECK(c.tau_steps == std::vector<int64_t>{10, 20});
  CHECK(c.tau_target == doctest::Approx(9.6));
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

TEST_CASE("Compare.Winners.NoClearWinnerOnATieOrWithinTheSeedsSpread") {
  // The 2x2 sweep of the report: best taus 1.005 against 1.005, each over two seeds that spread wider than the gap.
  std::vector<RunSummary> runs{run("adamw+seed=1", "1", 2.0, 1.0040, {{"opt", "adamw"}}), run("adamw+seed=2", "2", 2.0, 1.0062, {{"opt", "adamw"}}),
                               run("muon+seed=1", "1", 2.0, 1.0030, {{"opt", "muon"}}), run("muon+seed=2", "2", 2.0, 1.0066, {{"opt", "muon"}})};
  const auto c = compare(runs);
  const Winner& tau = winner(c, "highest best tau");
  CHECK(tau.runs.empty());
  CHECK(winner_line(c, tau) == "highest best tau: no clear winner: adamw (mean of 2 seeds) 1.005 and muon (mean of 2 seeds) "
                               "1.005 differ by 0.0003, within their seeds' spread 0.0036");
  for (const auto& row : summary_rows(c))
    for (bool win : row.wins) CHECK_FALSE(win);
  // Single runs on the same value: a tie names none.
  const auto tie = compare({run("a", "1", 2.0, 3.0), run("b", "1", 2.5, 3.0, {{"train.lr", "0.1"}})});
  CHECK(winner(tie, "highest best tau").runs.empty());
  CHECK(winner(tie, "highest best tau").no_clear_winner == "a 3 and b 3 tie");
  CHECK(winner(tie, "lowest final loss").runs == std::vector<size_t>{0});
}

TEST_CASE("Compare.Variants.TimeToTauNeedsATargetRunsCanMiss") {
  const std::vector<CurvePoint> curve{{0, 1.0, 1.0}, {10, 5.0, 2.5}};
  std::vector<RunSummary> runs{run("a+seed=1", "1", 1.0, 2.5, {}, curve), run("a+seed=2", "2", 1.1, 2.5, {}, curve),
                               run("b+seed=1", "1", 1.0, 2.5, {{"train.lr", "0.1"}}, curve)};
  const auto none = compare(runs);
  CHECK(std::isnan(none.tau_target));
  for (const auto& row : variant_rows(none)) CHECK(row.label.find("time to tau") == std::string::npos);
  const auto given = variant_rows(compare(runs, {.tau_target = 2.0}));
  CHECK(std::any_of(given.begin(), given.end(), [](const CompareRow& r) { return r.label.find("time to tau 2.00") == 0; }));
  // tau is at least 1: every run reaches 0.81 at its first evaluation.
  CHECK_THROWS_WITH_AS(compare(runs, {.tau_target = 0.81}), doctest::Contains("--tau-target 0.810: tau is at least 1"),
                       dflow::ConfigError);
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
