#include "nodes/step_record.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "nodes/run_context.hpp"

namespace dflow::nodes {

nlohmann::json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

StepRecord make_step_record(const RunContext& run, const StepPosition& p, int64_t run_steps, const StepTotals& s,
                            double loss, double grad_norm, double lr, const train::GuardVerdict& verdict) {
  StepRecord r;
  r.epoch = p.epoch;
  r.step_in_epoch = p.step_in_epoch + 1;
  r.steps_per_epoch = p.steps_per_epoch;
  r.global_step = p.global_step + 1;
  r.total_steps = run_steps;
  r.loss = loss;
  r.loss_weight = s.weight_sum;
  r.grad_norm = grad_norm;
  r.lr = lr;
  for (size_t k = 1; k < s.count_per_position.size(); ++k)
    r.accuracy_per_position.push_back(s.count_per_position[k] > 0 ? s.correct_per_position[k] / s.count_per_position[k]
                                                                 : 0.0);
  // The drafter kind's extra terms: the loss's parts, each / loss_weight,
  // and their per-slot series.
  const std::vector<drafter::RecordTerm> terms = run.record_terms();
  if (!terms.empty()) r.main_loss = s.weight_sum > 0 ? s.main_loss_sum / s.weight_sum : 0.0;
  auto per_slot = [&](const double* sums, size_t size, std::vector<double>& out) {
    for (size_t k = 1; k < s.count_per_position.size() && k < size; ++k)
      out.push_back(s.count_per_position[k] > 0 ? sums[k] / s.count_per_position[k] : 0.0);
  };
  const size_t block = s.count_per_position.size();
  size_t series = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    StepRecord::Term term;
    term.name = terms[i].name;
    const double sum = i < s.term_loss_sums.size() ? s.term_loss_sums[i] : 0.0;
    term.loss = s.weight_sum > 0 ? sum / s.weight_sum : 0.0;
    if (!terms[i].series.empty() && (series + 1) * block <= s.term_series_per_position.size()) {
      term.series = terms[i].series;
      per_slot(s.term_series_per_position.data() + series * block, block, term.per_position);
      ++series;
    }
    r.terms.push_back(std::move(term));
  }
  if (!terms.empty() || run.needs_teacher())
    per_slot(s.accept_rate_per_position.data(), s.accept_rate_per_position.size(), r.accept_rate_per_position);
  if (run.accept_rate_from_target && !r.accept_rate_per_position.empty()) {
    double tau = 1.0, reached = 1.0;
    for (const double a : r.accept_rate_per_position) tau += (reached *= a);
    r.expected_tau = tau;
  }
  r.micro_batches = s.micro_batches;
  r.anchors = s.anchors;
  r.real_tokens = s.real_tokens;
  r.padded_tokens = s.padded_tokens;
  r.excluded_samples = s.excluded_samples;
  r.batches_per_bucket = s.batches_per_bucket;
  r.sample_ids = s.sample_ids;
  // Per bucket length: the bucket's part of the loss (numerator and
  // denominator add up to the step's), tokens and batches. A grad norm per
  // bucket would need a gradient copy per micro-batch; it is given only for
  // a single-bucket step, where it is the step's.
  for (size_t b = 0; b < s.batches_per_bucket.size(); ++b) {
    if (s.batches_per_bucket[b] == 0) continue;
    BucketRecord bucket;
    bucket.length = run.config.data.buckets.at(b);
    bucket.loss_sum = s.bucket_ce_sum.at(b);
    bucket.loss_weight = s.bucket_weight_sum.at(b);
    bucket.loss = bucket.loss_weight > 0 ? bucket.loss_sum / bucket.loss_weight : 0.0;
    bucket.real_tokens = s.bucket_real_tokens.at(b);
    bucket.batches = s.batches_per_bucket[b];
    r.buckets.push_back(bucket);
  }
  if (r.buckets.size() == 1) r.buckets.front().grad_norm = grad_norm;

  r.guard.action = verdict.action;
  if (!verdict.kind.empty()) {
    r.guard.kind = verdict.kind;
    r.guard.policy = run.config.guard.policy;
    for (const auto& b : r.buckets) r.guard.bucket_lengths.push_back(b.length);
    r.guard.metric = verdict.metric;
    r.guard.value = verdict.value;
    r.guard.threshold = verdict.threshold;
    r.guard.reason = verdict.reason();
    r.guard.sample_ids = s.sample_ids;
    r.guard.sample_lengths = s.sample_lengths;
    r.guard.batches_per_bucket = s.batches_per_bucket;
  }
  return r;
}

nlohmann::json StepRecord::to_json() const {
  nlohmann::json r;
  r["kind"] = "step";
  r["epoch"] = epoch;
  r["step_in_epoch"] = step_in_epoch;
  r["steps_per_epoch"] = steps_per_epoch;
  r["epoch_progress"] = epoch_progress();
  r["global_step"] = global_step;
  r["total_steps"] = total_steps;
  r["run_progress"] = run_progress();
  r["loss"] = json_number(loss);
  r["loss_weight"] = loss_weight;
  r["accuracy_per_position"] = accuracy_per_position;
  if (main_loss) r["main_loss"] = json_number(*main_loss);
  for (const auto& term : terms) r[term.name + "_loss"] = json_number(term.loss);
  if (!accept_rate_per_position.empty()) r["accept_rate_per_position"] = accept_rate_per_position;
  if (expected_tau) r["expected_tau"] = json_number(*expected_tau);
  for (const auto& term : terms)
    if (!term.series.empty()) r[term.series] = term.per_position;
  r["grad_norm"] = json_number(grad_norm);
  r["lr"] = lr;
  r["micro_batches"] = micro_batches;
  r["anchors"] = anchors;
  r["real_tokens"] = real_tokens;
  r["padded_tokens"] = padded_tokens;
  r["padding_efficiency"] = padding_efficiency();
  r["batches_per_bucket"] = batches_per_bucket;
  nlohmann::json by_length = nlohmann::json::object();
  for (const auto& b : buckets) {
    auto& j = by_length[std::to_string(b.length)];
    j = {{"loss", json_number(b.loss)}, {"loss_sum", json_number(b.loss_sum)}, {"loss_weight", b.loss_weight},
         {"real_tokens", b.real_tokens}, {"batches", b.batches}};
    if (b.grad_norm) j["grad_norm"] = json_number(*b.grad_norm);
  }
  r["buckets"] = by_length;
  r["sample_ids"] = sample_ids;
  r["excluded_samples"] = excluded_samples;
  r["guard"] = {{"action", guard.action}};
  if (guard.event()) {
    r["guard"].update({{"kind", guard.kind},
                       {"policy", guard.policy},
                       {"bucket_lengths", guard.bucket_lengths},
                       {"metric", guard.metric},
                       {"value", json_number(guard.value)},
                       {"threshold", json_number(guard.threshold)},
                       {"reason", guard.reason},
                       {"sample_ids", guard.sample_ids},
                       {"sample_lengths", guard.sample_lengths},
                       {"batches_per_bucket", guard.batches_per_bucket}});
  }
  if (!guard.evidence.empty()) r["guard"].update(guard.evidence);
  r["time"] = {{"step_s", time.step_s}, {"elapsed_s", time.elapsed_s}, {"tokens_per_s", time.tokens_per_s},
               {"eta_s", time.eta_s}, {"cpu_s", time.cpu_s}};
  if (!time.rank_step_s.empty()) {
    r["time"]["rank_step_s"] = time.rank_step_s;
    r["time"]["slowest_rank"] = time.slowest_rank;
    r["time"]["allreduce_s"] = time.allreduce_s;
  }
  if (!telemetry.is_null()) r["telemetry"] = telemetry;
  return r;
}

nlohmann::json StepRecord::guard_event_json() const {
  nlohmann::json event = to_json()["guard"];
  event["kind"] = "guard";
  event["event"] = guard.kind;
  event["global_step"] = global_step;
  event["epoch"] = epoch;
  return event;
}

}  // namespace dflow::nodes
