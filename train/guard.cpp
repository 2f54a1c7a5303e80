#include "train/guard.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
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
  GuardVerdict v;
  const auto& policy = config_.policy;
  if (policy == "none") return v;
  const double loss = signal.loss, grad_norm = signal.grad_norm;
  if (signal.empty) {
    v.kind = "empty";
  } else if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    v.kind = "non_finite";
    v.metric = std::isfinite(loss) ? "grad_norm" : "loss";
    v.value = std::isfinite(loss) ? grad_norm : loss;
  } else if (policy != "halt") {
    const double loss_limit = threshold(losses_, config_.z_threshold, "loss");
    const double grad_limit = threshold(grad_norms_, config_.z_threshold, "grad_norm");
    if (loss > loss_limit) v.kind = "spike", v.metric = "loss", v.value = loss, v.threshold = loss_limit;
    else if (grad_norm > grad_limit) v.kind = "spike", v.metric = "grad_norm", v.value = grad_norm, v.threshold = grad_limit;
    if (v.kind.empty() && config_.per_bucket) {
      for (const auto& [bucket, bucket_loss] : signal.bucket_losses) {
        auto it = bucket_losses_.find(bucket);
        if (it == bucket_losses_.end()) continue;
        const double limit = threshold(it->second, config_.z_threshold, "loss@" + std::to_string(bucket));
        if (bucket_loss > limit) {
          v.kind = "spike", v.metric = "loss@" + std::to_string(bucket), v.value = bucket_loss, v.threshold = limit;
          break;
        }
      }
    }
  }
  if (policy == "rollback") {
    // A cliff: the loss stays above its (lower) cliff threshold step after
    // step. Non-finite losses count too: they are the worst cliff.
    const double cliff_limit = threshold(losses_, config_.cliff_z_threshold, "loss");
    v.above_cliff = !signal.empty && (!std::isfinite(loss) || loss > cliff_limit);
    cliff_run_ = v.above_cliff ? cliff_run_ + 1 : 0;
    v.cliff_steps = cliff_run_;
    if (cliff_run_ >= config_.cliff_steps) {
      v.kind = "cliff", v.metric = "loss", v.value = loss, v.threshold = cliff_limit;
      v.rollback = rollbacks_ < config_.max_rollbacks;
      v.halt = !v.rollback;
    }
  }
  // A run of spikes on one metric: after rebaseline_after() of them its level
  // has moved. Not for the loss under policy rollback, where a loss that
  // stays up is a cliff.
  const bool may_rebase = v.kind == "spike" && !(policy == "rollback" && v.metric.rfind("loss", 0) == 0);
  if (may_rebase && v.metric == spike_metric_) {
    spike_run_.push_back(signal);
  } else {
    spike_run_.clear();
    spike_metric_.clear();
    if (may_rebase) spike_run_.push_back(signal), spike_metric_ = v.metric;
  }
  if (static_cast<int>(spike_run_.size()) >= rebaseline_after()) {
    // The run's earlier steps become the metric's baseline (the caller
    // records this one as applied), judged from then on.
    std::deque<double>* history = history_of(spike_metric_);
    history->clear();
    for (size_t i = 0; i + 1 < spike_run_.size(); ++i) push(*history, value_of(spike_run_[i], spike_metric_));
    if (std::find(rebased_.begin(), rebased_.end(), spike_metric_) == rebased_.end()) rebased_.push_back(spike_metric_);
    GuardVerdict applied;
    applied.rebaselined = static_cast<int>(spike_run_.size());
    applied.metric = v.metric, applied.value = v.value, applied.threshold = v.threshold;
    applied.above_cliff = v.above_cliff, applied.cliff_steps = v.cliff_steps;
    spike_run_.clear();
    spike_metric_.clear();
    return applied;
  }
  if (v.kind.empty()) return v;
  if (may_rebase) v.spike_run = static_cast<int>(spike_run_.size());
  v.apply = false;
  v.halt = v.halt || (policy == "halt" && v.kind != "empty");
  v.quarantine = policy == "quarantine" && (v.kind == "non_finite" || v.kind == "spike");
  v.action = v.halt ? "halted" : v.rollback ? "rolled_back" : v.quarantine ? "quarantined" : "skipped";
  return v;
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
