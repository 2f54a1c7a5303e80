#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dflow::train {

int64_t Schedule::warmup_steps() const {
  return static_cast<int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps)));
}

double Schedule::lr_at(int64_t step) const {
  const int64_t warmup = warmup_steps();
  if (step < warmup) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (kind == "constant") return peak_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  if (kind == "linear") return peak_lr * (1.0 - progress);
  return peak_lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace dflow::train
