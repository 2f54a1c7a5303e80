#pragma once
// What optimizer_step drives, whichever optimizer its node type picked
// (optimizer_step.adamw: train/adamw.hpp, optimizer_step.muon:
// train/muon.hpp). Its state is plain named tensors, checkpointed as
// safetensors, and bf16 parameters get fp32 master weights.
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dflow::train {

// sqrt(sum of squared entries) over `grads` (undefined ones skipped), in fp64,
// with one read to the host: each tensor's sum of squares in fp64 on its
// device, as before, stacked and summed there. Reading each sum on its own
// cost a device sync per parameter on a GPU.
inline double global_grad_norm(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> squares;
  for (const auto& g : grads)
    if (g.defined()) squares.push_back(g.to(torch::kFloat64).pow(2).sum());
  if (squares.empty()) return 0.0;
  return torch::stack(squares).sum().sqrt().item<double>();
}

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Multiplies every gradient by `scale` (e.g. 1 / total loss weight).
  virtual void scale_grads(double scale) = 0;
  // sqrt(sum of squared gradient entries) over all parameters, in fp64
  // (global_grad_norm of grads()).
  double grad_norm() const { return global_grad_norm(grads()); }
  // The parameters' gradients (undefined where a parameter has none).
  virtual std::vector<torch::Tensor> grads() const = 0;
  // Scales gradients so that their global norm is at most max_norm (no-op when 0).
  void clip_grad_norm(double max_norm, double current_norm) {
    if (max_norm <= 0 || !(current_norm > max_norm)) return;
    scale_grads(max_norm / (current_norm + 1e-6));
  }
  // One update at the scheduled learning rate `lr` (train.lr times the
  // schedule's factor; an optimizer with groups of their own LR scales each
  // by the same factor).
  virtual void step(double lr) = 0;
  virtual void zero_grad() = 0;
  virtual int64_t steps_taken() const = 0;
  virtual std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const = 0;
  // Restores state_tensors() output; refuses missing or mis-shaped entries by name.
  virtual void load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken) = 0;
};

}  // namespace dflow::train
