#pragma once
// `dflow compare RUN_DIR...`: runs side by side, so that a person sees which
// variant wins. Each run is read from its own files only (metrics.jsonl,
// graph.json, its newest checkpoint's config.yaml), so a finished, a
// still-running (its last line half written) and a resumed run all compare.
// This is the data; compare_text.cpp and compare_html.cpp render it.
#include <cstdint>
#include <filesystem>
#include <functional>
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

// What a run's nodes say its figures mean, by the node kinds (the caller that
// knows them fills it: nodes/figure_terms.hpp): dotted keys to values, each
// node's params that define the figure (resolved: defaults included; those
// that change only how it is computed left out) and the run config keys it
// reads ("pipeline.nodes.drafter.params.objective": "decay",
// "train.loss_decay_gamma": "7").
struct FigureTerms {
  FlatConfig loss;      // of the nodes that compute the training loss
  FlatConfig tau;       // of the nodes that measure tau (empty: none does)
  std::string unknown;  // why they could not be told ("" when they were)
};

struct CompareOptions {
  size_t recent_steps = 50;  // "last N steps" throughput
  size_t loss_tail = 10;     // final loss: mean of the last this many finite losses
  size_t wait_lines = 3;     // lines of the bottleneck analysis kept per run
  double tau_target = kUnknownValue;  // "time to tau": unknown = no such row (a tau above 1 that runs may miss)
  size_t tau_steps = 4;      // "tau at step S": this many steps that every run evaluated
  // A run's FigureTerms from its config; without it a run's terms are empty:
  // its loss is defined by the run config keys alone, and tau by nothing.
  std::function<FigureTerms(const RunConfig& config)> figure_terms = {};
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
  FigureTerms terms;                  // from config by CompareOptions::figure_terms
  std::vector<std::string> warnings;  // what was tolerated: a cut last line, a resume, no config
};

// The numbers of one loaded run (no config: read_run adds it).
RunSummary summarize_run(const RunData& run, const CompareOptions& options = {});

// A directory without metrics.jsonl is no run: ConfigError naming it (the CLI exits 2).
void require_run_dir(const std::filesystem::path& run_dir);

// Loads and summarizes RUN_DIR (require_run_dir first).
RunSummary read_run(const std::filesystem::path& run_dir, const CompareOptions& options = {});

// Runs that differ only in their seed (run.seed; run.name and run.out_dir
// aside): one variant measured several times. A run without a config yet is
// a variant of its own.
struct Variant {
  std::string name;          // the runs' common name without their seed ("lr=0.02" of "lr=0.02+seed=7")
  std::vector<size_t> runs;  // indices into the compared runs, in their order
  std::vector<std::string> seeds;  // run.seed of each ("?" without config)
};

// One metric and the variant best at it ("lowest final loss": run 1).
// Variants are ranked by their mean over seeds; a metric is ranked only
// where it means the same in every run (report/compare_fairness.hpp), and
// the best variant wins only when its mean leads the next one's by more
// than the spread (max - min) of either's seeds (kWinnerRule).
struct Winner {
  std::string metric;        // "lowest final loss (mean of last 10 steps)"
  std::vector<size_t> runs;  // the runs of the winning variant; empty when none wins
  double value = kUnknownValue;  // the winning value (a variant's mean)
  std::vector<double> values;    // every run's, unknown where it has none
  std::string unit;              // "", "real tokens/s", "steps/s"
  std::string no_winner;         // why the runs' figures cannot be ranked although some have the metric ("" otherwise)
  std::string no_clear_winner;   // why the best is not clearly ahead: a tie, or a lead within the seeds' spread
  std::string margin;            // a winner with seeds: its lead and the spread it beats ("" otherwise)
};

// How a winner is decided, as the comparison says it.
inline constexpr const char* kWinnerRule =
    "a variant wins a metric when its mean over seeds leads the next variant's by more than the spread (max - min) of "
    "either's seeds; runs of one seed each have no spread, and only an exact tie names none";

struct Comparison {
  std::vector<RunSummary> runs;
  std::vector<Variant> variants;  // every run in exactly one
  std::vector<ConfigDifference> config_diff;
  std::vector<Winner> winners;
  std::vector<std::string> notes;  // what to keep in mind: runs at different steps, runs without config
  CompareOptions options;
  double tau_target = kUnknownValue;  // resolved options.tau_target
  std::vector<int64_t> tau_steps;     // steps every run with tau evaluated, up to options.tau_steps of them
};

// "lr=0.2 (mean of 3 seeds)", or the name of a variant of one run.
std::string variant_label(const Variant& variant);

// Groups runs into variants (each run alone when none differ only in seed).
std::vector<Variant> group_variants(const std::vector<RunSummary>& runs);

std::vector<Winner> pick_winners(const std::vector<RunSummary>& runs, const std::vector<Variant>& variants,
                                 const CompareOptions& options = {});
// Each run a variant of its own.
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
