#pragma once
// Seeds aggregated: each variant's figures as mean and spread over its runs,
// tau at steps every run evaluated, and the wall time to reach a tau.
#include <cstdint>
#include <string>
#include <vector>

#include "report/compare.hpp"

namespace dflow::report {

struct Spread {
  size_t n = 0;  // runs with a finite value
  double mean = kUnknownValue;
  double sd = kUnknownValue;  // sample standard deviation (unknown for one run)
  double min = kUnknownValue, max = kUnknownValue;
};
Spread spread_of(const std::vector<double>& values);  // over the finite ones

struct VariantFigures {
  Spread final_loss, best_tau, real_tokens_per_s, time_to_tau_s;
  std::vector<Spread> tau_at;  // one per Comparison::tau_steps
  size_t reached_tau = 0;      // runs whose tau reached Comparison::tau_target
};
std::vector<VariantFigures> variant_figures(const Comparison& comparison);

// The tau whose wall time to reach is compared: options' (unknown when none
// is given: no row then). ConfigError for one at or below 1, which every run
// reaches at its first evaluation.
double resolve_tau_target(const CompareOptions& options);
// The steps at which every run that has tau evaluated it: up to `count` of
// them, evenly spread, the last common one included.
std::vector<int64_t> common_tau_steps(const std::vector<RunSummary>& runs, size_t count);
// The wall time of the first evaluation at or above `target` (unknown when never).
double time_to_tau_s(const RunSummary& run, double target);

// "1.23 ± 0.04" (or "1.23" for one run, "-" for none), numbers as the table shows them.
std::string spread_text(const Spread& s, int significant = 4);

}  // namespace dflow::report
