#include "drafter/activation_probe.hpp"

#include <cmath>
#include <limits>

namespace dflow::drafter {

namespace {
thread_local ActivationProbe* g_current = nullptr;
}  // namespace

ActivationProbe::ActivationProbe() : previous_(g_current) { g_current = this; }
ActivationProbe::~ActivationProbe() { g_current = previous_; }

ActivationProbe* ActivationProbe::current() { return g_current; }

void ActivationProbe::record(const std::string& name, const torch::Tensor& x) {
  if (!x.defined() || x.numel() == 0) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor magnitude = x.detach().abs();
  // An inf or a NaN is the worst a point can hold: kept as +inf.
  const double most = magnitude.isfinite().all().item<bool>() ? magnitude.max().item<double>()
                                                              : std::numeric_limits<double>::infinity();
  auto [it, inserted] = maxima_.emplace(name, most);
  if (!inserted && most > it->second) it->second = most;
}

}  // namespace dflow::drafter
