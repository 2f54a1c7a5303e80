// One run's numbers for `dflow compare`: curves over steps and wall time,
// final loss, throughput, tau, and where its graph waited.
#include <algorithm>
#include <cmath>
#include <map>

#include "config/errors.hpp"
#include "report/analysis.hpp"
#include "report/compare.hpp"

namespace dflow::report {

namespace fs = std::filesystem;

namespace {

const nlohmann::json& field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json null;
  if (!object.is_object()) return null;
  auto it = object.find(key);
  return it == object.end() ? null : *it;
}

int64_t step_of(const nlohmann::json& record) {
  const auto& step = field(record, "global_step");
  return step.is_number_integer() ? step.get<int64_t>() : -1;
}

// Each step's training wall time. time.elapsed_s counts from its process's
// start; a resumed process starts again from 0, and its first record's
// elapsed_s equals its step_s (both measured from that start), so the time
// of the processes before it is added.
std::vector<double> wall_times(const std::vector<nlohmann::json>& steps) {
  std::vector<double> wall(steps.size(), kUnknownValue);
  double offset = 0, previous_elapsed = kUnknownValue;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& time = field(steps[i], "time");
    const double elapsed = number_or_nan(field(time, "elapsed_s")), step_s = number_or_nan(field(time, "step_s"));
    if (!std::isfinite(elapsed)) continue;
    const bool restarted = i > 0 && std::isfinite(previous_elapsed) &&
                           (elapsed < previous_elapsed || (std::isfinite(step_s) && std::abs(elapsed - step_s) <= 1e-9 * std::max(1.0, elapsed)));
    if (restarted) offset = wall[i - 1];
    wall[i] = offset + elapsed;
    previous_elapsed = elapsed;
  }
  return wall;
}

double real_tokens(const nlohmann::json& step) {
  const double tokens = number_or_nan(field(step, "real_tokens"));
  return std::isfinite(tokens) ? tokens : 0.0;
}

// Real tokens and steps per second over records (first, last]; unknown without time.
Throughput throughput_between(const std::vector<nlohmann::json>& steps, const std::vector<double>& wall, size_t first, size_t last,
                              double start_wall) {
  Throughput out;
  const double seconds = wall[last] - start_wall;
  if (!(seconds > 0)) return out;
  double tokens = 0;
  for (size_t i = first; i <= last; ++i) tokens += real_tokens(steps[i]);
  out.real_tokens_per_s = tokens / seconds;
  out.steps_per_s = static_cast<double>(last - first + 1) / seconds;
  return out;
}

// mean_tau of each eval record by step (a repeated step: the last record), at the wall time of its step.
std::vector<CurvePoint> tau_curve(const RunData& run, const std::vector<double>& wall) {
  std::map<int64_t, double> tau_at;
  for (const auto& record : run.events)
    if (record.value("kind", "") == "eval" && step_of(record) >= 0 && field(record, "mean_tau").is_number())
      tau_at[step_of(record)] = record["mean_tau"].get<double>();
  std::map<int64_t, double> wall_at;
  for (size_t i = 0; i < run.steps.size(); ++i)
    if (std::isfinite(wall[i])) wall_at[step_of(run.steps[i])] = wall[i];
  std::vector<CurvePoint> out;
  for (const auto& [step, tau] : tau_at) {
    double at = step == 0 ? 0.0 : kUnknownValue;  // step 0: the untrained baseline, before training
    if (auto it = wall_at.upper_bound(step); it != wall_at.begin()) at = std::prev(it)->second;
    out.push_back({step, at, tau});
  }
  return out;
}

}  // namespace

RunSummary summarize_run(const RunData& run, const CompareOptions& options) {
  RunSummary s;
  s.run_dir = run.run_dir;
  s.warnings = run.warnings;
  s.step_records = run.steps.size();
  const std::vector<double> wall = wall_times(run.steps);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const double loss = number_or_nan(field(run.steps[i], "loss"));
    if (std::isfinite(loss)) s.loss.push_back({step_of(run.steps[i]), wall[i], loss});
  }
  if (!run.steps.empty()) {
    const auto& last = run.steps.back();
    s.last_step = step_of(last);
    if (field(last, "total_steps").is_number_integer()) s.total_steps = last["total_steps"].get<int64_t>();
    const size_t end = run.steps.size() - 1;
    s.wall_s = std::isfinite(wall[end]) ? wall[end] : kUnknownValue;
    s.whole_run = throughput_between(run.steps, wall, 0, end, 0.0);
    if (const size_t window = std::min(options.recent_steps, end); window > 0 && std::isfinite(wall[end - window]))
      s.recent = throughput_between(run.steps, wall, end - window + 1, end, wall[end - window]);
  }
  if (!s.loss.empty()) {
    const size_t tail = std::clamp<size_t>(options.loss_tail, 1, s.loss.size());
    double sum = 0;
    for (size_t i = s.loss.size() - tail; i < s.loss.size(); ++i) sum += s.loss[i].value;
    s.final_loss = sum / static_cast<double>(tail);
  }
  s.tau = tau_curve(run, wall);
  if (!s.tau.empty()) {
    s.final_tau = TauAt{s.tau.back().value, s.tau.back().step};
    auto best = std::max_element(s.tau.begin(), s.tau.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
    s.best_tau = TauAt{best->value, best->step};  // max_element: the first of equal values, the earliest step
  }
  const Analysis analysis = analyze(run);
  s.waits.assign(analysis.summary.begin(), analysis.summary.begin() + std::min(options.wait_lines, analysis.summary.size()));
  return s;
}

void require_run_dir(const fs::path& run_dir) {
  if (!fs::is_regular_file(run_dir / "metrics.jsonl"))
    throw ConfigError(run_dir.string() + ": not a dflow run directory (no metrics.jsonl); give the run's out_dir");
}

RunSummary read_run(const fs::path& run_dir, const CompareOptions& options) {
  require_run_dir(run_dir);
  // The analysis needs the newest telemetry only; older snapshots are not plotted here.
  RunSummary s = summarize_run(load_run(run_dir, {.telemetry_points = 16, .telemetry_tail = 512}), options);
  try {
    s.config = read_run_config(run_dir);  // none yet: compare() notes it
  } catch (const std::exception& e) {
    s.warnings.push_back(std::string("config not read: ") + e.what());
  }
  if (s.config && options.figure_terms) s.terms = options.figure_terms(*s.config);
  return s;
}

}  // namespace dflow::report
