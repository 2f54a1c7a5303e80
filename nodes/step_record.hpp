#pragma once
// The record of exactly one optimizer step (invariant 4), typed: sinks read
// its fields; to_json() is what metrics.jsonl, the live view and the report
// see (the same keys as always).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nodes/progress.hpp"
#include "nodes/step_totals.hpp"
#include "train/guard.hpp"

namespace dflow::nodes {

class RunContext;

struct BucketRecord {
  int length = 0;               // bucket length in tokens
  double loss = 0, loss_sum = 0, loss_weight = 0;
  int64_t real_tokens = 0, batches = 0;
  std::optional<double> grad_norm;  // only for a single-bucket step (then the step's)
};

struct GuardRecord {
  std::string action = "applied";  // applied | skipped | halted | rolled_back | ...
  std::string kind;                // empty: nothing remarkable; else spike | non_finite | cliff
  std::string policy, metric, reason;
  double value = 0, threshold = 0;
  std::vector<int> bucket_lengths;
  std::vector<int64_t> sample_ids, sample_lengths, batches_per_bucket;
  nlohmann::json evidence = nlohmann::json::object();  // quarantine / rollback details
  bool event() const { return !kind.empty(); }
};

struct StepTiming {
  double step_s = 0, elapsed_s = 0, tokens_per_s = 0, eta_s = 0;
  // CPU time (user + system, all threads) this process has used so far:
  // what a step costs on a shared CPU, where wall time depends on the load.
  double cpu_s = 0;
  std::vector<double> rank_step_s;  // several ranks: each rank's work since its previous all-reduce
  int64_t slowest_rank = 0;
  double allreduce_s = 0;
};

struct StepRecord {
  int epoch = 0;                 // 0-based
  int64_t step_in_epoch = 0;     // completed steps in this epoch (1 after its first)
  int64_t steps_per_epoch = 0;
  int64_t global_step = 0;       // completed optimizer steps (1 after the first)
  // The steps the run ends after: epochs x steps per epoch, or run.max_steps
  // when that ends it sooner (the LR schedule's length; a resume keeps it).
  int64_t total_steps = 0;
  double loss = 0, loss_weight = 0, grad_norm = 0, lr = 0;
  std::vector<double> accuracy_per_position;  // block slots k = 1..B-1
  // With a drafter kind's extra loss terms: the loss's parts, each /
  // loss_weight ("main_loss", "<term>_loss"), and a term's per-slot series
  // (k = 1..B-1) under its own key; with them or with a loss that reads the
  // teacher, the mean analytical acceptance rate (1 - TV) per slot.
  struct Term {
    std::string name, series;
    double loss = 0;
    std::vector<double> per_position;
  };
  std::optional<double> main_loss;
  std::vector<Term> terms;
  std::vector<double> accept_rate_per_position;
  // With a loss that reads the target's distribution: the tau those rates
  // imply, 1 + sum_k prod_{j <= k} a_j over slots 1..B-1 (each slot's mean
  // rate; a product of means, not the mean of each block's products).
  std::optional<double> expected_tau;
  int64_t micro_batches = 0, anchors = 0, real_tokens = 0, padded_tokens = 0, excluded_samples = 0;
  std::vector<int64_t> batches_per_bucket;
  std::vector<BucketRecord> buckets;  // buckets present in the step
  std::vector<int64_t> sample_ids;
  GuardRecord guard;
  StepTiming time;
  nlohmann::json telemetry;  // the graph's, added by metric_sample when the record arrives

  double epoch_progress() const { return static_cast<double>(step_in_epoch) / static_cast<double>(steps_per_epoch); }
  double run_progress() const { return static_cast<double>(global_step) / static_cast<double>(total_steps); }
  double padding_efficiency() const {
    return padded_tokens > 0 ? static_cast<double>(real_tokens) / static_cast<double>(padded_tokens) : 0.0;
  }
  nlohmann::json to_json() const;
  // The guard event's own record (kind "guard"), for steps where guard.event().
  nlohmann::json guard_event_json() const;
};

// The step's record from its totals and the optimizer's decision; the run
// ends after `run_steps` steps (its LR schedule's: TrainableState::schedule).
StepRecord make_step_record(const RunContext& run, const StepPosition& position, int64_t run_steps,
                            const StepTotals& totals, double loss, double grad_norm, double lr,
                            const train::GuardVerdict& guard);

// JSON has no NaN/Inf: they are written as strings so a record always parses.
nlohmann::json json_number(double v);

}  // namespace dflow::nodes
