#include "train/guard.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

namespace dflow::train {

std::string GuardVerdict::reason() const {
  std::ostringstream out;
  if (kind == "non_finite") out << "non-finite " << metric;
  else if (kind == "spike") out << metric << " " << value << " > spike threshold " << threshold;
  else if (kind == "cliff")
    out << metric << " " << value << " > cliff threshold " << threshold << " for " << cliff_steps << " steps in a row";
  else if (kind == "empty") out << "no sample left to train on (all excluded)";
  return out.str();
}

GuardVerdict GuardVerdict::event(std::string kind, std::string metric, double value, double threshold) {
  GuardVerdict verdict;
  verdict.kind = std::move(kind);
  verdict.metric = std::move(metric);
  verdict.value = value;
  verdict.threshold = threshold;
  return verdict;
}

GuardVerdict GuardVerdict::new_level(const GuardVerdict& last, int run_length) {
  GuardVerdict verdict;
  verdict.rebaselined = run_length;
  verdict.metric = last.metric;
  verdict.value = last.value;
  verdict.threshold = last.threshold;
  verdict.above_cliff = last.above_cliff;
  verdict.cliff_steps = last.cliff_steps;
  return verdict;
}

void GuardVerdict::become_cliff(double loss, double cliff_threshold, bool rollbacks_left) {
  kind = "cliff";
  metric = "loss";
  value = loss;
  threshold = cliff_threshold;
  rollback = rollbacks_left;
  halt = !rollbacks_left;
}

void GuardVerdict::act_under(const std::string& policy) {
  apply = false;
  halt = halt || (policy == "halt" && kind != "empty");
  quarantine = policy == "quarantine" && (kind == "non_finite" || kind == "spike");
  action = halt ? "halted" : rollback ? "rolled_back" : quarantine ? "quarantined" : "skipped";
}

void GuardVerdict::escalate_to_halt() {
  rollback = false;
  halt = true;
  action = "halted";
}

StabilityGuard::StabilityGuard(config::GuardConfig config) : config_(std::move(config)) {}

int StabilityGuard::rebaseline_after() const { return std::max(4, config_.warmup_steps / 4); }

double StabilityGuard::threshold(const std::deque<double>& history, double z, const std::string& metric) const {
  const bool rebased = std::find(rebased_.begin(), rebased_.end(), metric) != rebased_.end();
  if (static_cast<int>(history.size()) < (rebased ? 4 : std::max(config_.warmup_steps, 4)))
    return std::numeric_limits<double>::infinity();
  std::vector<double> v(history.begin(), history.end());
  auto median_of = [](std::vector<double>& x) {
    std::nth_element(x.begin(), x.begin() + x.size() / 2, x.end());
    return x[x.size() / 2];
  };
  const double median = median_of(v);
  for (auto& x : v) x = std::abs(x - median);
  // 1.4826 * MAD estimates the standard deviation of normal data. Late in a
  // run grad norms cluster tightly and the MAD shrinks; the floor of 10% of
  // the median keeps ordinary wobble (a few percent) from being skipped: a
  // spike must stand z_threshold tenths of the baseline above it at least.
  const double scale = std::max(1.4826 * median_of(v), 0.1 * std::abs(median) + 1e-12);
  return median + z * scale;
}

GuardVerdict StabilityGuard::decide(const GuardSignal& signal) {
  if (config_.policy == "none") return GuardVerdict::applied();
  GuardVerdict verdict = find_event(signal);
  if (config_.policy == "rollback") count_cliff(signal, verdict);
  if (extend_spike_run(signal, verdict)) return rebaseline(verdict);
  if (verdict.kind.empty()) return verdict;
  if (may_rebase(verdict)) verdict.spike_run = static_cast<int>(spike_run_.size());
  verdict.act_under(config_.policy);
  return verdict;
}

GuardVerdict StabilityGuard::find_event(const GuardSignal& signal) const {
  if (signal.empty) return GuardVerdict::event("empty");
  if (!std::isfinite(signal.loss)) return GuardVerdict::event("non_finite", "loss", signal.loss);
  if (!std::isfinite(signal.grad_norm)) return GuardVerdict::event("non_finite", "grad_norm", signal.grad_norm);
  if (config_.policy == "halt") return GuardVerdict::applied();  // halt acts on non-finite values only
  return find_spike(signal);
}

GuardVerdict StabilityGuard::find_spike(const GuardSignal& signal) const {
  const double z = config_.z_threshold;
  if (const double limit = threshold(losses_, z, "loss"); signal.loss > limit)
    return GuardVerdict::event("spike", "loss", signal.loss, limit);
  if (const double limit = threshold(grad_norms_, z, "grad_norm"); signal.grad_norm > limit)
    return GuardVerdict::event("spike", "grad_norm", signal.grad_norm, limit);
  if (!config_.per_bucket) return GuardVerdict::applied();
  for (const auto& [bucket, bucket_loss] : signal.bucket_losses) {
    const auto it = bucket_losses_.find(bucket);
    if (it == bucket_losses_.end()) continue;
    const std::string metric = "loss@" + std::to_string(bucket);
    if (const double limit = threshold(it->second, z, metric); bucket_loss > limit)
      return GuardVerdict::event("spike", metric, bucket_loss, limit);
  }
  return GuardVerdict::applied();
}

void StabilityGuard::count_cliff(const GuardSignal& signal, GuardVerdict& verdict) {
  // A cliff: the loss stays above its (lower) cliff threshold step after
  // step. Non-finite losses count too: they are the worst cliff.
  const double limit = threshold(losses_, config_.cliff_z_threshold, "loss");
  verdict.above_cliff = !signal.empty && (!std::isfinite(signal.loss) || signal.loss > limit);
  cliff_run_ = verdict.above_cliff ? cliff_run_ + 1 : 0;
  verdict.cliff_steps = cliff_run_;
  if (cliff_run_ >= config_.cliff_steps) verdict.become_cliff(signal.loss, limit, rollbacks_ < config_.max_rollbacks);
}

// Not the loss under policy rollback, where a loss that stays up is a cliff.
bool StabilityGuard::may_rebase(const GuardVerdict& verdict) const {
  return verdict.kind == "spike" && !(config_.policy == "rollback" && verdict.metric.rfind("loss", 0) == 0);
}

// A run of spikes on one metric: after rebaseline_after() of them its level has moved.
bool StabilityGuard::extend_spike_run(const GuardSignal& signal, const GuardVerdict& verdict) {
  const bool rebasable = may_rebase(verdict);
  if (!rebasable || verdict.metric != spike_metric_) {
    spike_run_.clear();
    spike_metric_.clear();
    if (rebasable) spike_metric_ = verdict.metric;
  }
  if (rebasable) spike_run_.push_back(signal);
  return static_cast<int>(spike_run_.size()) >= rebaseline_after();
}

// The run's earlier steps become the metric's baseline (the caller records
// the last one as applied), judged from then on.
GuardVerdict StabilityGuard::rebaseline(const GuardVerdict& last) {
  std::deque<double>* history = history_of(spike_metric_);
  history->clear();
  for (size_t i = 0; i + 1 < spike_run_.size(); ++i) push(*history, value_of(spike_run_[i], spike_metric_));
  if (std::find(rebased_.begin(), rebased_.end(), spike_metric_) == rebased_.end()) rebased_.push_back(spike_metric_);
  GuardVerdict verdict = GuardVerdict::new_level(last, static_cast<int>(spike_run_.size()));
  spike_run_.clear();
  spike_metric_.clear();
  return verdict;
}

std::deque<double>* StabilityGuard::history_of(const std::string& metric) {
  if (metric == "loss") return &losses_;
  if (metric == "grad_norm") return &grad_norms_;
  return &bucket_losses_[std::stoi(metric.substr(5))];  // "loss@<bucket>"
}

double StabilityGuard::value_of(const GuardSignal& signal, const std::string& metric) const {
  if (metric == "loss") return signal.loss;
  if (metric == "grad_norm") return signal.grad_norm;
  const auto it = signal.bucket_losses.find(std::stoi(metric.substr(5)));
  return it == signal.bucket_losses.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

GuardVerdict StabilityGuard::check(double loss, double grad_norm) const {
  auto copy = *this;
  return copy.decide(GuardSignal{loss, grad_norm, false, {}});
}

void StabilityGuard::record_applied(double loss, double grad_norm) {
  record_applied(GuardSignal{loss, grad_norm, false, {}});
}

void StabilityGuard::push(std::deque<double>& history, double value) const {
  history.push_back(value);
  while (static_cast<int>(history.size()) > config_.window) history.pop_front();
}

void StabilityGuard::record_applied(const GuardSignal& signal) {
  if (signal.empty || !std::isfinite(signal.loss) || !std::isfinite(signal.grad_norm)) return;
  push(losses_, signal.loss);
  push(grad_norms_, signal.grad_norm);
  if (config_.per_bucket)
    for (const auto& [bucket, loss] : signal.bucket_losses)
      if (std::isfinite(loss)) push(bucket_losses_[bucket], loss);
}

void StabilityGuard::restore_after_rollback(const nlohmann::json& state, int rollbacks) {
  restore(state);
  rollbacks_ = rollbacks;
  cliff_run_ = 0;
}

nlohmann::json StabilityGuard::state() const {
  nlohmann::json buckets = nlohmann::json::object();
  for (const auto& [bucket, history] : bucket_losses_)
    buckets[std::to_string(bucket)] = std::vector<double>(history.begin(), history.end());
  nlohmann::json spikes = nlohmann::json::array();
  for (const auto& s : spike_run_) {
    nlohmann::json bucket_losses = nlohmann::json::object();
    for (const auto& [bucket, loss] : s.bucket_losses) bucket_losses[std::to_string(bucket)] = loss;
    spikes.push_back({{"loss", s.loss}, {"grad_norm", s.grad_norm}, {"bucket_losses", bucket_losses}});
  }
  return {{"losses", std::vector<double>(losses_.begin(), losses_.end())},
          {"spike_run", spikes},
          {"spike_metric", spike_metric_},
          {"rebased", rebased_},
          {"grad_norms", std::vector<double>(grad_norms_.begin(), grad_norms_.end())},
          {"bucket_losses", buckets},
          {"cliff_run", cliff_run_},
          {"rollbacks", rollbacks_}};
}

void StabilityGuard::restore(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("losses")) return;
  auto l = state["losses"].get<std::vector<double>>(), g = state["grad_norms"].get<std::vector<double>>();
  losses_.assign(l.begin(), l.end());
  grad_norms_.assign(g.begin(), g.end());
  bucket_losses_.clear();
  if (state.contains("bucket_losses"))
    for (const auto& [bucket, history] : state["bucket_losses"].items()) {
      auto h = history.get<std::vector<double>>();
      bucket_losses_[std::stoi(bucket)].assign(h.begin(), h.end());
    }
  spike_run_.clear();
  if (state.contains("spike_run"))
    for (const auto& s : state["spike_run"]) {
      GuardSignal signal{s.at("loss").get<double>(), s.at("grad_norm").get<double>(), false, {}};
      for (const auto& [bucket, loss] : s.at("bucket_losses").items())
        signal.bucket_losses[std::stoi(bucket)] = loss.get<double>();
      spike_run_.push_back(std::move(signal));
    }
  spike_metric_ = state.value("spike_metric", std::string());
  rebased_ = state.value("rebased", std::vector<std::string>());
  cliff_run_ = state.value("cliff_run", 0);
  rollbacks_ = state.value("rollbacks", 0);
}

}  // namespace dflow::train
