#include "report/compare_variants.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <optional>
#include <set>

#include "config/errors.hpp"
#include "report/compare_fairness.hpp"
#include "report/compare_render.hpp"

namespace dflow::report {

namespace {

// The run's name without its seed: "lr=0.02+seed=7" -> "lr=0.02",
// "baseline-1234" -> "baseline"; the name itself when it does not hold it.
std::string without_seed(const std::string& name, const std::string& seed) {
  for (const std::string& part : {"+seed=" + seed, "seed=" + seed + "+", "-seed" + seed, "-" + seed, "_" + seed}) {
    auto at = name.find(part);
    if (at != std::string::npos) return name.substr(0, at) + name.substr(at + part.size());
  }
  return name;
}

std::string seed_of(const RunSummary& run) {
  if (!run.config) return "?";
  auto it = run.config->values.find("run.seed");
  return it == run.config->values.end() ? "?" : it->second;
}

std::string variant_name(const std::vector<RunSummary>& runs, const Variant& v) {
  if (v.runs.size() == 1) return runs[v.runs.front()].name;
  const std::string first = without_seed(runs[v.runs.front()].name, v.seeds.front());
  for (size_t k = 1; k < v.runs.size(); ++k)
    if (without_seed(runs[v.runs[k]].name, v.seeds[k]) != first || first.empty())
      return runs[v.runs.front()].name + " (+" + std::to_string(v.runs.size() - 1) + " seeds)";
  return first;
}

}  // namespace

std::vector<Variant> group_variants(const std::vector<RunSummary>& runs) {
  std::vector<Variant> out;
  std::vector<FlatConfig> keys;  // per variant, for the runs with config
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    size_t at = out.size();
    if (run.config) {
      const FlatConfig key = variant_key(run.config->values);
      for (size_t v = 0; v < out.size(); ++v)
        if (runs[out[v].runs.front()].config && keys[v] == key) at = v;
      if (at == out.size()) keys.push_back(key);
    } else {
      keys.emplace_back();
    }
    if (at == out.size()) out.push_back({});
    out[at].runs.push_back(i);
    out[at].seeds.push_back(seed_of(run));
  }
  for (auto& v : out) v.name = variant_name(runs, v);
  return out;
}

Spread spread_of(const std::vector<double>& values) {
  Spread s;
  double sum = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    ++s.n;
    sum += v;
    s.min = std::isfinite(s.min) ? std::min(s.min, v) : v;
    s.max = std::isfinite(s.max) ? std::max(s.max, v) : v;
  }
  if (!s.n) return s;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n > 1) {
    double squares = 0;
    for (double v : values)
      if (std::isfinite(v)) squares += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(squares / static_cast<double>(s.n - 1));
  }
  return s;
}

double resolve_tau_target(const CompareOptions& options) {
  if (!std::isnan(options.tau_target) && !(options.tau_target > 1.0))
    throw ConfigError("--tau-target " + format_number(options.tau_target, 3) +
                      ": tau is at least 1 (every drafted block keeps the target's own token), so every run reaches it at "
                      "its first evaluation; give a tau above 1 that some runs may not reach");
  return options.tau_target;
}

std::vector<int64_t> common_tau_steps(const std::vector<RunSummary>& runs, size_t count) {
  std::optional<std::set<int64_t>> common;
  for (const auto& run : runs) {
    if (run.tau.empty()) continue;
    std::set<int64_t> steps;
    for (const auto& p : run.tau) steps.insert(p.step);
    if (!common) {
      common = steps;
      continue;
    }
    std::set<int64_t> both;
    std::set_intersection(common->begin(), common->end(), steps.begin(), steps.end(), std::inserter(both, both.end()));
    common = both;
  }
  if (!common || common->empty() || count == 0) return {};
  const std::vector<int64_t> all(common->begin(), common->end());
  if (all.size() <= count) return all;
  std::vector<int64_t> out;
  for (size_t k = 1; k <= count; ++k) out.push_back(all[(all.size() * k) / count - 1]);  // the last one included
  return out;
}

double time_to_tau_s(const RunSummary& run, double target) {
  if (!std::isfinite(target)) return kUnknownValue;
  for (const auto& p : run.tau)
    if (p.value >= target) return p.wall_s;
  return kUnknownValue;
}

std::vector<VariantFigures> variant_figures(const Comparison& c) {
  std::vector<VariantFigures> out;
  for (const auto& v : c.variants) {
    std::vector<double> loss, best, tokens, reach;
    std::vector<std::vector<double>> at(c.tau_steps.size());
    VariantFigures f;
    for (size_t i : v.runs) {
      const RunSummary& run = c.runs[i];
      loss.push_back(run.final_loss);
      best.push_back(run.best_tau ? run.best_tau->tau : kUnknownValue);
      tokens.push_back(run.whole_run.real_tokens_per_s);
      reach.push_back(time_to_tau_s(run, c.tau_target));
      if (std::isfinite(reach.back())) ++f.reached_tau;
      for (size_t k = 0; k < c.tau_steps.size(); ++k) {
        double value = kUnknownValue;
        for (const auto& p : run.tau)
          if (p.step == c.tau_steps[k]) value = p.value;  // the last record of a step wins
        at[k].push_back(value);
      }
    }
    f.final_loss = spread_of(loss);
    f.best_tau = spread_of(best);
    f.real_tokens_per_s = spread_of(tokens);
    f.time_to_tau_s = spread_of(reach);
    for (const auto& values : at) f.tau_at.push_back(spread_of(values));
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<CompareRow> variant_rows(const Comparison& c) {
  if (c.variants.size() == c.runs.size()) return {};
  const auto figures = variant_figures(c);
  auto row = [&](std::string label, const std::function<std::string(size_t)>& text) {
    CompareRow r{std::move(label), {}, std::vector<bool>(c.variants.size(), false)};
    for (size_t v = 0; v < c.variants.size(); ++v) r.cells.push_back(text(v));
    return r;
  };
  std::vector<CompareRow> rows;
  rows.push_back(row("seeds", [&](size_t v) {
    std::string seeds;
    for (const auto& s : c.variants[v].seeds) seeds += (seeds.empty() ? "" : " ") + s;
    return seeds;
  }));
  rows.push_back(row("final loss (mean of last " + std::to_string(c.options.loss_tail) + " steps)",
                     [&](size_t v) { return spread_text(figures[v].final_loss); }));
  rows.push_back(row("best tau", [&](size_t v) { return spread_text(figures[v].best_tau, 3); }));
  for (size_t k = 0; k < c.tau_steps.size(); ++k)
    rows.push_back(row("tau at step " + std::to_string(c.tau_steps[k]),
                       [&](size_t v) { return spread_text(figures[v].tau_at[k], 3); }));
  if (std::isfinite(c.tau_target))
    rows.push_back(row("time to tau " + format_number(c.tau_target, 3) + " (runs that reached it)", [&](size_t v) {
      const auto& f = figures[v];
      const std::string reached = " (" + std::to_string(f.reached_tau) + "/" + std::to_string(c.variants[v].runs.size()) + ")";
      if (!f.time_to_tau_s.n) return "-" + reached;
      return format_duration(f.time_to_tau_s.mean) +
             (f.time_to_tau_s.n > 1 ? " ± " + format_duration(f.time_to_tau_s.sd) : std::string()) + reached;
    }));
  rows.push_back(row("real tokens/s (whole run)", [&](size_t v) {
    const Spread& s = figures[v].real_tokens_per_s;
    if (!s.n) return std::string("-");
    return format_rate(s.mean) + (s.n > 1 ? " ± " + format_rate(s.sd) : std::string());
  }));
  return rows;
}

std::string spread_text(const Spread& s, int significant) {
  if (!s.n) return "-";
  if (s.n == 1) return format_number(s.mean, significant);
  return format_number(s.mean, significant) + " ± " + format_number(s.sd, 2);
}

}  // namespace dflow::report
