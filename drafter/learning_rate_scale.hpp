#pragma once
// The factor on the scheduled learning rate of one drafter parameter (by
// name and tensor), which both optimizers apply (train/adamw, train/muon):
// 1 but where a kind's parameter needs a smaller step than the rest to stay
// stable at the run's lr. Today DFlash2's dynamic kernel projections (the
// rule and why: drafter/kinds/dflash2/kind.cpp); a kind that needs one adds
// its rule there too.
#include <torch/torch.h>

#include <string>

namespace dflow::drafter {

double learning_rate_scale(const std::string& name, const torch::Tensor& param);

}  // namespace dflow::drafter
