#pragma once
// `dflow compare RUN_DIR...`: runs side by side, so that a person sees which
// variant wins. Each run is read from its own files only (metrics.jsonl,
// graph.json, its newest checkpoint's config.yaml), so a finished, a
// still-running (its last line half written) and a resumed run all compare.
// This is the data; compare_text.cpp and compare_html.cpp render it.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "report/config_diff.hpp"
#include "report/run_data.hpp"

namespace dflow::report {

inline constexpr double kUnknownValue = std::numeric_limits<double>::quiet_NaN();

struct CurvePoint {
  int64_t step = 0;
  double wall_s = 0;  // training wall time (see RunSummary::wall_s)
  double value = 0;
};

struct Throughput {
  double real_tokens_per_s = kUnknownValue;
  double steps_per_s = kUnknownValue;
};

struct TauAt {
  double tau = kUnknownValue;
  int64_t step = -1;
};

struct CompareOptions {
  size_t recent_steps = 50;  // "last N steps" throughput
  size_t loss_tail = 10;     // final loss: mean of the last this many finite losses
  size_t wait_lines = 3;     // lines of the bottleneck analysis kept per run
};

struct RunSummary {
  std::string name;  // the directory's name; its path as given when names collide
  std::filesystem::path run_dir;
  int64_t last_step = 0;
  int64_t total_steps = 0;  // 0: the records do not say
  size_t step_records = 0;
  // Wall time of the run's training processes: each record's time.elapsed_s
  // counts from its process's start, so a resume adds the time before it.
  double wall_s = 0;
  std::vector<CurvePoint> loss;  // each step with a finite loss
  std::vector<CurvePoint> tau;   // eval records (mean_tau), ascending step; the last record of a step wins
  double final_loss = kUnknownValue;
  Throughput whole_run, recent;  // recent: over the last CompareOptions::recent_steps steps
  std::optional<TauAt> best_tau, final_tau;  // best: the first step that reached the highest tau
  std::vector<std::string> waits;  // where the graph waited (analyze()'s summary, first lines)
  std::optional<RunConfig> config;
  std::vector<std::string> warnings;  // what was tolerated: a cut last line, a resume, no config
};

// The numbers of one loaded run (no config: read_run adds it).
RunSummary summarize_run(const RunData& run, const CompareOptions& options = {});

// A directory without metrics.jsonl is no run: ConfigError naming it (the CLI exits 2).
void require_run_dir(const std::filesystem::path& run_dir);

// Loads and summarizes RUN_DIR (require_run_dir first).
RunSummary read_run(const std::filesystem::path& run_dir, const CompareOptions& options = {});

// One metric and the run(s) best at it ("lowest final loss": run 1).
struct Winner {
  std::string metric;        // "lowest final loss (mean of last 10 steps)"
  std::vector<size_t> runs;  // indices into the compared runs; several on a tie; empty when no run has the metric
  double value = kUnknownValue;  // the winning value
  std::vector<double> values;    // every run's, unknown where it has none
  std::string unit;              // "", "real tokens/s", "steps/s"
};

struct Comparison {
  std::vector<RunSummary> runs;
  std::vector<ConfigDifference> config_diff;
  std::vector<Winner> winners;
  std::vector<std::string> notes;  // what to keep in mind: runs at different steps, runs without config
  CompareOptions options;
};

std::vector<Winner> pick_winners(const std::vector<RunSummary>& runs, const CompareOptions& options = {});
// "last 50 steps", or "last 50 steps (all, where fewer)" when a run has fewer.
std::string recent_label(const std::vector<RunSummary>& runs, const CompareOptions& options);

// Names each run by its directory; where two share a name, by its path as given.
void name_runs(std::vector<RunSummary>& runs);

// Summaries, names, config differences, winners and notes of loaded runs.
Comparison compare(std::vector<RunSummary> runs, const CompareOptions& options = {});

// read_run on each directory, then compare. Every directory is checked to be
// a run before any is read.
Comparison compare_runs(const std::vector<std::filesystem::path>& run_dirs, const CompareOptions& options = {});

}  // namespace dflow::report
