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
  return out.str();
}

StabilityGuard::StabilityGuard(config::GuardConfig config) : config_(std::move(config)) {}

double StabilityGuard::spike_threshold(const std::deque<double>& history) const {
  if (static_cast<int>(history.size()) < std::max(config_.warmup_steps, 4)) return std::numeric_limits<double>::infinity();
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
  return median + config_.z_threshold * scale;
}

GuardVerdict StabilityGuard::check(double loss, double grad_norm) const {
  GuardVerdict v;
  if (config_.policy == "none") return v;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    v.kind = "non_finite";
    v.metric = std::isfinite(loss) ? "grad_norm" : "loss";
    v.value = std::isfinite(loss) ? grad_norm : loss;
  } else if (config_.policy != "halt") {
    const double loss_limit = spike_threshold(losses_), grad_limit = spike_threshold(grad_norms_);
    if (loss > loss_limit) v.kind = "spike", v.metric = "loss", v.value = loss, v.threshold = loss_limit;
    else if (grad_norm > grad_limit) v.kind = "spike", v.metric = "grad_norm", v.value = grad_norm, v.threshold = grad_limit;
  }
  if (v.kind.empty()) return v;
  v.apply = false;
  v.halt = config_.policy == "halt";
  v.action = v.halt ? "halted" : "skipped";
  return v;
}

void StabilityGuard::record_applied(double loss, double grad_norm) {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return;
  losses_.push_back(loss);
  grad_norms_.push_back(grad_norm);
  while (static_cast<int>(losses_.size()) > config_.window) losses_.pop_front(), grad_norms_.pop_front();
}

nlohmann::json StabilityGuard::state() const {
  return {{"losses", std::vector<double>(losses_.begin(), losses_.end())},
          {"grad_norms", std::vector<double>(grad_norms_.begin(), grad_norms_.end())}};
}

void StabilityGuard::restore(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("losses")) return;
  auto l = state["losses"].get<std::vector<double>>(), g = state["grad_norms"].get<std::vector<double>>();
  losses_.assign(l.begin(), l.end());
  grad_norms_.assign(g.begin(), g.end());
}

}  // namespace dflow::train
