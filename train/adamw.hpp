#pragma once
// AdamW with decoupled weight decay, written out so that its state is plain
// named tensors (checkpointed as safetensors) and so that bf16 parameters get
// fp32 master weights. One instance owns the optimizer state of one model.
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dflow::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // `params`: the trainable parameters by name (order is kept).
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options);

  // Multiplies every gradient by `scale` (e.g. 1 / total loss weight).
  void scale_grads(double scale);
  // sqrt(sum of squared gradient entries) over all parameters, in fp64.
  double grad_norm() const;
  // Scales gradients so that their global norm is at most max_norm (no-op when 0).
  void clip_grad_norm(double max_norm, double current_norm);
  void step(double lr);
  void zero_grad();

  int64_t steps_taken() const { return steps_taken_; }
  // exp_avg.<name>, exp_avg_sq.<name>, master.<name> (bf16 parameters only).
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const;
  // Restores state_tensors() output; refuses missing or mis-shaped entries by name.
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param;        // the model's parameter (any dtype, any device)
    torch::Tensor master;       // fp32 copy when param is not fp32, else undefined
    torch::Tensor exp_avg;      // fp32, like param
    torch::Tensor exp_avg_sq;   // fp32, like param
  };
  std::vector<Slot> slots_;
  AdamWOptions options_;
  int64_t steps_taken_ = 0;
};

}  // namespace dflow::train
