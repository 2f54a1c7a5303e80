// Several runs' summaries put together: names, what differs in their
// configs, which run wins each metric, and what to keep in mind reading them.
#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "config/log.hpp"
#include "report/compare_fairness.hpp"
#include "report/compare_variants.hpp"

namespace dflow::report {

namespace fs = std::filesystem;

namespace {

std::string short_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

// The variant with the best finite mean wins when it leads the next one by
// more than the noise: the larger spread (max - min) of either's seeds, or
// a relative 1e-9 where both are single runs (a tie). Otherwise
// no_clear_winner says why. `why_not` (non-empty: the runs' figures mean
// different things) names none.
Winner best_of(const std::vector<RunSummary>& runs, const std::vector<Variant>& variants, std::string metric,
               std::string unit, bool higher_wins, const std::function<double(const RunSummary&)>& value_of,
               const std::string& why_not = {}) {
  Winner w{std::move(metric), {}, kUnknownValue, {}, std::move(unit), {}, {}, {}};
  for (const auto& run : runs) w.values.push_back(value_of(run));
  std::vector<std::pair<Spread, size_t>> ranked;  // variants with a value, best first
  for (size_t v = 0; v < variants.size(); ++v) {
    std::vector<double> values;
    for (size_t i : variants[v].runs) values.push_back(w.values[i]);
    if (const Spread s = spread_of(values); s.n) ranked.push_back({s, v});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    return higher_wins ? a.first.mean > b.first.mean : a.first.mean < b.first.mean;
  });
  if (ranked.empty()) return w;
  if (!why_not.empty()) {
    w.no_winner = why_not;
    return w;
  }
  const auto& [best, best_variant] = ranked.front();
  if (ranked.size() > 1) {
    const auto& [next, next_variant] = ranked[1];
    const double gap = std::abs(best.mean - next.mean);
    const double noise = std::max(best.n > 1 ? best.max - best.min : 0.0, next.n > 1 ? next.max - next.min : 0.0);
    const std::string unit = w.unit.empty() ? "" : " " + w.unit;
    const std::string pair = variant_label(variants[best_variant]) + " " + short_number(best.mean) + unit + " and " +
                             variant_label(variants[next_variant]) + " " + short_number(next.mean) + unit;
    if (gap <= 1e-9 * std::max(std::abs(best.mean), std::abs(next.mean))) {
      w.no_clear_winner = pair + " tie";
      return w;
    }
    if (gap <= noise) {
      w.no_clear_winner = pair + " differ by " + short_number(gap) + ", within their seeds' spread " + short_number(noise);
      return w;
    }
    if (noise > 0)
      w.margin = "ahead of " + variants[next_variant].name + " by " + short_number(gap) + ", more than the seeds' spread " +
                 short_number(noise);
  }
  w.value = best.mean;
  w.runs = variants[best_variant].runs;
  return w;
}

// Why the runs' losses (or taus) cannot be ranked; "" when they can.
std::string why_not_ranked(const std::vector<RunSummary>& runs, const std::vector<Variant>& variants,
                           std::optional<std::map<std::string, std::string>> (*definition)(const RunSummary&)) {
  if (variants.size() < 2) return {};
  std::vector<std::optional<std::map<std::string, std::string>>> definitions;
  std::vector<std::string> names, unknown_because;
  for (const auto& v : variants) {
    const auto& run = runs[v.runs.front()];  // a variant's runs share the definitions
    definitions.push_back(definition(run));
    names.push_back(v.name);
    unknown_because.push_back(run.terms.unknown);
  }
  return why_not_comparable(definitions, names, unknown_because);
}

std::vector<std::string> comparison_notes(const std::vector<RunSummary>& runs) {
  std::vector<std::string> notes;
  std::set<int64_t> last_steps;
  std::string steps_text;
  for (const auto& run : runs) {
    last_steps.insert(run.last_step);
    steps_text += (steps_text.empty() ? "" : ", ") + run.name + " " + std::to_string(run.last_step);
  }
  if (last_steps.size() > 1)
    notes.push_back("the runs stopped at different steps (" + steps_text + "): final values are not at the same step");
  std::string without_config;
  for (const auto& run : runs)
    if (!run.config) without_config += (without_config.empty() ? "" : ", ") + run.name;
  if (!without_config.empty())
    notes.push_back("no resolved config in " + without_config + " (no checkpoint yet): its config is not compared");
  return notes;
}

}  // namespace

std::string variant_label(const Variant& v) {
  return v.runs.size() > 1 ? v.name + " (mean of " + std::to_string(v.runs.size()) + " seeds)" : v.name;
}

void name_runs(std::vector<RunSummary>& runs) {
  auto dir_name = [](const fs::path& dir) {
    const fs::path clean = fs::absolute(dir).lexically_normal();
    const std::string name = clean.filename().string();
    return name.empty() ? clean.parent_path().filename().string() : name;  // "runs/a/" has an empty filename
  };
  std::map<std::string, int> uses;
  for (const auto& run : runs) ++uses[dir_name(run.run_dir)];
  for (auto& run : runs) run.name = uses[dir_name(run.run_dir)] > 1 ? run.run_dir.string() : dir_name(run.run_dir);
}

std::string recent_label(const std::vector<RunSummary>& runs, const CompareOptions& options) {
  const bool fewer = std::any_of(runs.begin(), runs.end(), [&](const RunSummary& r) {
    return r.last_step < static_cast<int64_t>(options.recent_steps);
  });
  return "last " + std::to_string(options.recent_steps) + " steps" + (fewer ? " (all, where fewer)" : "");
}

std::vector<Winner> pick_winners(const std::vector<RunSummary>& runs, const std::vector<Variant>& variants,
                                 const CompareOptions& options) {
  const std::string recent = recent_label(runs, options);
  return {
      best_of(runs, variants, "lowest final loss (mean of last " + std::to_string(options.loss_tail) + " steps)", "", false,
              [](const RunSummary& r) { return r.final_loss; }, why_not_ranked(runs, variants, loss_definition)),
      best_of(runs, variants, "highest best tau", "", true,
              [](const RunSummary& r) { return r.best_tau ? r.best_tau->tau : kUnknownValue; },
              why_not_ranked(runs, variants, tau_definition)),
      best_of(runs, variants, "highest throughput (" + recent + ")", "real tokens/s", true,
              [](const RunSummary& r) { return r.recent.real_tokens_per_s; }),
      best_of(runs, variants, "most steps per second (" + recent + ")", "steps/s", true,
              [](const RunSummary& r) { return r.recent.steps_per_s; }),
  };
}

std::vector<Winner> pick_winners(const std::vector<RunSummary>& runs, const CompareOptions& options) {
  std::vector<Variant> alone;
  for (size_t i = 0; i < runs.size(); ++i) alone.push_back({runs[i].name, {i}, {}});
  return pick_winners(runs, alone, options);
}

Comparison compare(std::vector<RunSummary> runs, const CompareOptions& options) {
  Comparison c;
  c.options = options;
  name_runs(runs);
  std::vector<const FlatConfig*> configs;
  for (const auto& run : runs) configs.push_back(run.config ? &run.config->values : nullptr);
  c.config_diff = diff_configs(configs);
  c.variants = group_variants(runs);
  c.winners = pick_winners(runs, c.variants, options);
  c.notes = comparison_notes(runs);
  c.tau_target = resolve_tau_target(options);
  c.tau_steps = common_tau_steps(runs, options.tau_steps);
  c.runs = std::move(runs);
  return c;
}

Comparison compare_runs(const std::vector<fs::path>& run_dirs, const CompareOptions& options) {
  for (const auto& dir : run_dirs) require_run_dir(dir);
  std::vector<RunSummary> runs;
  for (const auto& dir : run_dirs) {
    runs.push_back(read_run(dir, options));
    log::info("compare", log::str(dir.string(), ": ", runs.back().step_records, " step records, ", runs.back().tau.size(),
                                  " evaluations"));
  }
  return compare(std::move(runs), options);
}

}  // namespace dflow::report
