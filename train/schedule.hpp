#pragma once
// Learning-rate schedule: linear warmup over warmup_ratio of the run, then
// cosine (to 0), linear (to 0) or constant. A pure function of the step, so a
// resumed run needs no scheduler state beyond global_step.
#include <cstdint>
#include <string>

namespace dflow::train {

struct Schedule {
  double peak_lr = 6e-4;
  int64_t total_steps = 1;
  double warmup_ratio = 0.04;
  std::string kind = "cosine";  // cosine | linear | constant

  int64_t warmup_steps() const;
  // LR used for optimizer step `step` (0-based).
  double lr_at(int64_t step) const;
};

}  // namespace dflow::train
