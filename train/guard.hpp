#pragma once
// The stability guard: decides, before the optimizer update, whether a step
// is applied. Non-finite loss or grad norm, and spikes far above the rolling
// robust baseline (median and MAD of the last `window` applied steps), are
// caught; the policy says what happens to them. Costs two scalars per step.
#include <deque>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"

namespace dflow::train {

struct GuardVerdict {
  bool apply = true;       // take the optimizer update
  bool halt = false;       // stop the run (policy halt)
  std::string kind;        // "" | "non_finite" | "spike"
  std::string metric;      // "loss" | "grad_norm"
  double value = 0;        // the offending value
  double threshold = 0;    // what it exceeded (spikes)
  std::string action = "applied";  // applied | skipped | halted
  std::string reason() const;      // "loss 41.2 > spike threshold 9.7"
};

class StabilityGuard {
 public:
  explicit StabilityGuard(config::GuardConfig config);

  GuardVerdict check(double loss, double grad_norm) const;
  // Feeds the baseline with an applied step's values.
  void record_applied(double loss, double grad_norm);

  nlohmann::json state() const;  // checkpointed, so a resumed run decides the same
  void restore(const nlohmann::json& state);

 private:
  // Returns the spike threshold of `history` (infinity before warmup).
  double spike_threshold(const std::deque<double>& history) const;
  config::GuardConfig config_;
  std::deque<double> losses_, grad_norms_;
};

}  // namespace dflow::train
