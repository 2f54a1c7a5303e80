#pragma once
// The stability guard: decides, before the optimizer update, whether a step
// is applied. Non-finite loss or grad norm, and spikes far above the rolling
// robust baseline (median and MAD of the last `window` applied steps), are
// caught; the policy says what happens to them. Under policy rollback it also
// counts consecutive steps whose loss stands above the (lower) cliff
// threshold: `cliff_steps` of them in a row are a cliff. A rise that lasts is
// not a spike: when rebaseline_after() steps in a row spiked on the same
// metric (early in training the grad norm may climb several-fold while the
// loss falls), its level has moved; those steps become that metric's
// baseline, judged from then on without a new warmup, and the step is
// applied, so the guard never skips a run to a standstill. Under policy
// rollback a lasting loss rise stays a cliff. Costs a few host
// scalars per step (loss, grad norm, one loss per bucket of the step).
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace dflow::train {

struct GuardVerdict {
  bool apply = true;       // take the optimizer update
  bool halt = false;       // stop the run (policy halt, or rollbacks exhausted)
  bool quarantine = false; // record the step's samples (policy quarantine)
  bool rollback = false;   // restore the last good snapshot (policy rollback)
  bool above_cliff = false;  // loss above the cliff threshold (rollback bookkeeping)
  std::string kind;        // "" | "non_finite" | "spike" | "cliff" | "empty"
  std::string metric;      // "loss" | "grad_norm" | "loss@<bucket length>"
  double value = 0;        // the offending value
  double threshold = 0;    // what it exceeded (spikes, cliffs)
  int cliff_steps = 0;     // consecutive steps above the cliff threshold so far
  int rebaselined = 0;     // > 0: `metric` spiked this many steps in a row, so that is its new
                           // baseline (value/threshold say what rose); the step is applied
  int spike_run = 0;       // > 0: this spike is the n-th in a row on `metric`, a run that may
                           // yet become its new level (then its earlier steps were no spikes)
  std::string action = "applied";  // applied | skipped | quarantined | rolled_back | halted
  std::string reason() const;      // "loss 41.2 > spike threshold 9.7"

  // A step that needs no action: applied.
  static GuardVerdict applied() { return {}; }
  // An event of `kind` found on `metric` (still applied until acted on).
  static GuardVerdict event(std::string kind, std::string metric = "", double value = 0, double threshold = 0);
  // The spike run that ended in `last` (its `run_length`-th spike) is the
  // metric's new level: an applied step that says what rose. The cliff
  // bookkeeping of `last` stays.
  static GuardVerdict new_level(const GuardVerdict& last, int run_length);

  // The loss has stood above its cliff threshold for cliff_steps steps: a
  // cliff, whatever else was found. Rolled back while rollbacks are left,
  // halted otherwise.
  void become_cliff(double loss, double cliff_threshold, bool rollbacks_left);
  // An event, acted on under `policy`: not applied; halted, rolled back,
  // quarantined or skipped.
  void act_under(const std::string& policy);
  // A rollback with nothing to go back to: halted instead.
  void escalate_to_halt();
};

// What the guard sees of one step: scalars already on the host.
struct GuardSignal {
  double loss = 0;
  double grad_norm = 0;
  bool empty = false;  // no weighted position left (every sample excluded)
  std::map<int, double> bucket_losses;  // bucket length -> that bucket's loss in the step
};

class StabilityGuard {
 public:
  explicit StabilityGuard(config::GuardConfig config);

  // The decision for one step; advances the cliff counter (policy rollback).
  GuardVerdict decide(const GuardSignal& signal);
  // The decision without advancing any counter (what decide would say now).
  GuardVerdict check(double loss, double grad_norm) const;
  // Feeds the baselines with an applied step's values.
  void record_applied(const GuardSignal& signal);
  void record_applied(double loss, double grad_norm);
  // After a rollback restored `state`: the cliff counter starts over and the
  // count of rollbacks becomes `rollbacks` (it is not undone by the restore).
  void restore_after_rollback(const nlohmann::json& state, int rollbacks);

  int rollbacks() const { return rollbacks_; }
  int cliff_run() const { return cliff_run_; }
  const config::GuardConfig& config() const { return config_; }
  // Spikes in a row on one metric that make a new level: max(4, warmup_steps / 4).
  int rebaseline_after() const;

  nlohmann::json state() const;  // checkpointed, so a resumed run decides the same
  void restore(const nlohmann::json& state);

 private:
  // The steps of decide(), in order.
  GuardVerdict find_event(const GuardSignal& signal) const;  // empty, non-finite, spike
  GuardVerdict find_spike(const GuardSignal& signal) const;  // loss, grad norm, then each bucket's loss
  void count_cliff(const GuardSignal& signal, GuardVerdict& verdict);  // policy rollback
  // Whether `verdict` may be part of a run of spikes that becomes a new level.
  bool may_rebase(const GuardVerdict& verdict) const;
  // Extends or ends the current run of spikes; true when it is long enough to be a new level.
  bool extend_spike_run(const GuardSignal& signal, const GuardVerdict& verdict);
  GuardVerdict rebaseline(const GuardVerdict& last);
  // median + z * max(1.4826 MAD, 10% of the median); infinity before warmup
  // (before 4 values for a re-based metric).
  double threshold(const std::deque<double>& history, double z, const std::string& metric) const;
  std::deque<double>* history_of(const std::string& metric);
  double value_of(const GuardSignal& signal, const std::string& metric) const;
  void push(std::deque<double>& history, double value) const;
  config::GuardConfig config_;
  std::deque<double> losses_, grad_norms_;
  std::map<int, std::deque<double>> bucket_losses_;  // per_bucket only
  std::vector<GuardSignal> spike_run_;  // the current run of spikes on spike_metric_ (checkpointed)
  std::string spike_metric_;
  std::vector<std::string> rebased_;    // metrics re-based at least once: judged from 4 values
  int cliff_run_ = 0;   // consecutive steps above the cliff threshold
  int rollbacks_ = 0;   // done in this run (checkpointed)
};

}  // namespace dflow::train
