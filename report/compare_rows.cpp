// The rows both renderings of `dflow compare` show, and how numbers read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "report/compare_render.hpp"

namespace dflow::report {

std::string format_number(double value, int significant) {
  if (!std::isfinite(value)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%#.*g", significant, value);  // "2.00": digits line up
  return text;
}

std::string format_rate(double per_s) {
  if (!std::isfinite(per_s)) return "-";
  const double a = std::abs(per_s);
  char text[32];
  if (a >= 1e6) std::snprintf(text, sizeof text, "%.2fM", per_s / 1e6);
  else if (a >= 1e4) std::snprintf(text, sizeof text, "%.1fk", per_s / 1e3);
  else if (a >= 100) std::snprintf(text, sizeof text, "%.0f", per_s);
  else return format_number(per_s, 3);
  return text;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s % 3600 / 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else if (seconds >= 10) std::snprintf(text, sizeof text, "%lds", s);
  else std::snprintf(text, sizeof text, "%.1fs", seconds);
  return text;
}

namespace {

std::string tau_text(const std::optional<TauAt>& tau) {
  return tau ? format_number(tau->tau, 3) + " at step " + std::to_string(tau->step) : "-";
}

// A row of one text per run; `winner` (an index into Comparison::winners) marks its cells.
CompareRow row(const Comparison& c, std::string label, const std::function<std::string(const RunSummary&)>& text,
               std::optional<size_t> winner = std::nullopt) {
  CompareRow r{std::move(label), {}, std::vector<bool>(c.runs.size(), false)};
  for (const auto& run : c.runs) r.cells.push_back(text(run));
  if (winner && *winner < c.winners.size() && c.runs.size() > 1)
    for (size_t i : c.winners[*winner].runs) r.wins[i] = true;
  return r;
}

}  // namespace

std::vector<CompareRow> summary_rows(const Comparison& c) {
  const std::string recent = recent_label(c.runs, c.options);
  // Winner indices follow pick_winners: loss, best tau, tokens/s, steps/s.
  return {
      row(c, "run directory", [](const RunSummary& r) { return r.run_dir.string(); }),
      row(c, "steps", [](const RunSummary& r) {
        return std::to_string(r.last_step) + (r.total_steps > 0 ? " / " + std::to_string(r.total_steps) : "");
      }),
      row(c, "wall time", [](const RunSummary& r) { return format_duration(r.wall_s); }),
      row(c, "final loss (mean of last " + std::to_string(c.options.loss_tail) + " steps)",
          [](const RunSummary& r) { return format_number(r.final_loss); }, 0),
      row(c, "best tau", [](const RunSummary& r) { return tau_text(r.best_tau); }, 1),
      row(c, "final tau", [](const RunSummary& r) { return tau_text(r.final_tau); }),
      row(c, "real tokens/s (whole run)", [](const RunSummary& r) { return format_rate(r.whole_run.real_tokens_per_s); }),
      row(c, "real tokens/s (" + recent + ")", [](const RunSummary& r) { return format_rate(r.recent.real_tokens_per_s); }, 2),
      row(c, "steps/s (whole run)", [](const RunSummary& r) { return format_number(r.whole_run.steps_per_s, 3); }),
      row(c, "steps/s (" + recent + ")", [](const RunSummary& r) { return format_number(r.recent.steps_per_s, 3); }, 3),
  };
}

std::string winner_line(const Comparison& c, const Winner& w) {
  if (!w.no_winner.empty()) return w.metric + ": no winner: " + w.no_winner;
  if (!w.no_clear_winner.empty()) return w.metric + ": no clear winner: " + w.no_clear_winner;
  if (w.runs.empty()) return w.metric + ": no run has it";
  auto value = [&](double v) {  // in a sentence: no trailing zeros ("3.5", not "3.500")
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v);
    return w.unit.empty() ? std::string(text) : format_rate(v) + " " + w.unit;
  };
  // Variants (a run alone is one), each by its mean over its seeds.
  std::vector<Variant> variants = c.variants;
  if (variants.empty())
    for (size_t i = 0; i < c.runs.size(); ++i) variants.push_back({c.runs[i].name, {i}, {}});
  auto mean_of = [&](const Variant& v) {
    double sum = 0;
    size_t n = 0;
    for (size_t i : v.runs)
      if (i < w.values.size() && std::isfinite(w.values[i])) sum += w.values[i], ++n;
    return n ? sum / static_cast<double>(n) : kUnknownValue;
  };
  std::string line, others;
  for (const auto& v : variants) {
    if (std::find(w.runs.begin(), w.runs.end(), v.runs.front()) != w.runs.end()) {
      line = w.metric + ": " + variant_label(v) + " " + value(w.value);
    } else {
      const double m = mean_of(v);
      others += (others.empty() ? "" : ", ") + variant_label(v) + " " + (std::isfinite(m) ? value(m) : "-");
    }
  }
  if (!w.margin.empty()) line += ", " + w.margin;
  if (!others.empty()) line += "; " + others;
  return line;
}

}  // namespace dflow::report
