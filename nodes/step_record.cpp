#include "nodes/step_record.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace dflow::nodes {

namespace {
// JSON has no NaN/Inf: write them as strings so a record always parses.
nlohmann::json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
}  // namespace

nlohmann::json make_step_record(RunState& state, const StepStats& step, double loss, double grad_norm, double lr,
                                const train::GuardVerdict& guard) {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  const auto since = state.last_step_end == clock::time_point{} ? state.started_at : state.last_step_end;
  state.last_step_end = now;

  const auto& p = step.position;
  const auto& s = step.sums;
  nlohmann::json acc = nlohmann::json::array();
  for (size_t k = 1; k < s.count_per_position.size(); ++k)
    acc.push_back(s.count_per_position[k] > 0 ? s.correct_per_position[k] / s.count_per_position[k] : 0.0);

  nlohmann::json r;
  r["kind"] = "step";
  r["epoch"] = p.epoch;
  r["step_in_epoch"] = p.step_in_epoch + 1;
  r["steps_per_epoch"] = p.steps_per_epoch;
  r["epoch_progress"] = static_cast<double>(p.step_in_epoch + 1) / static_cast<double>(p.steps_per_epoch);
  r["global_step"] = p.global_step + 1;
  r["total_steps"] = state.total_steps;
  r["run_progress"] = static_cast<double>(p.global_step + 1) / static_cast<double>(state.total_steps);
  r["loss"] = number(loss);
  r["loss_weight"] = s.weight_sum;
  r["accuracy_per_position"] = acc;
  r["grad_norm"] = number(grad_norm);
  r["lr"] = lr;
  r["micro_batches"] = s.micro_batches;
  r["anchors"] = s.anchors;
  r["real_tokens"] = s.real_tokens;
  r["padded_tokens"] = s.padded_tokens;
  r["padding_efficiency"] = s.padded_tokens > 0 ? static_cast<double>(s.real_tokens) / s.padded_tokens : 0.0;
  r["batches_per_bucket"] = s.batches_per_bucket;
  // Per bucket length: the bucket's part of the loss (numerator and
  // denominator add up to the step's), tokens and batches. A grad norm per
  // bucket would need a gradient copy per micro-batch; it is given only for
  // a single-bucket step, where it is the step's.
  nlohmann::json buckets = nlohmann::json::object();
  std::vector<int> present;
  for (size_t b = 0; b < s.batches_per_bucket.size(); ++b) {
    if (s.batches_per_bucket[b] == 0) continue;
    const int length = state.config.data.buckets.at(b);
    present.push_back(length);
    const double ce = b < s.bucket_ce_sum.size() ? s.bucket_ce_sum[b] : 0.0;
    const double weight = b < s.bucket_weight_sum.size() ? s.bucket_weight_sum[b] : 0.0;
    buckets[std::to_string(length)] = {{"loss", number(weight > 0 ? ce / weight : 0.0)},
                                       {"loss_sum", number(ce)},
                                       {"loss_weight", weight},
                                       {"real_tokens", b < s.bucket_real_tokens.size() ? s.bucket_real_tokens[b] : 0},
                                       {"batches", s.batches_per_bucket[b]}};
  }
  if (present.size() == 1) buckets[std::to_string(present.front())]["grad_norm"] = number(grad_norm);
  r["buckets"] = buckets;
  r["sample_ids"] = s.sample_ids;
  r["excluded_samples"] = s.excluded_samples;
  r["guard"] = {{"action", guard.action}};
  if (!guard.kind.empty()) {
    r["guard"].update({{"kind", guard.kind},
                       {"policy", state.config.guard.policy},
                       {"bucket_lengths", present},
                       {"metric", guard.metric},
                       {"value", number(guard.value)},
                       {"threshold", number(guard.threshold)},
                       {"reason", guard.reason()},
                       {"sample_ids", s.sample_ids},
                       {"sample_lengths", s.sample_lengths},
                       {"batches_per_bucket", s.batches_per_bucket}});
  }

  const double step_s = std::chrono::duration<double>(now - since).count();
  const double elapsed_s = std::chrono::duration<double>(now - state.started_at).count();
  const int64_t steps_done_here = p.global_step + 1 - state.completed_steps_at_start;
  const double eta_s = steps_done_here > 0
                           ? elapsed_s / steps_done_here * static_cast<double>(state.stop_step - (p.global_step + 1))
                           : 0.0;
  r["time"] = {{"step_s", step_s},
               {"elapsed_s", elapsed_s},
               {"tokens_per_s", step_s > 0 ? s.real_tokens / step_s : 0.0},
               {"eta_s", eta_s}};
  if (!step.rank_busy_s.empty()) {
    // Each rank's time from its previous all-reduce to this one (its own
    // work); the slowest sets the pace, the others wait in the all-reduce.
    auto slowest = std::max_element(step.rank_busy_s.begin(), step.rank_busy_s.end()) - step.rank_busy_s.begin();
    r["time"]["rank_step_s"] = step.rank_busy_s;
    r["time"]["slowest_rank"] = slowest;
    r["time"]["allreduce_s"] = step.allreduce_s;
  }
  return r;
}

}  // namespace dflow::nodes
