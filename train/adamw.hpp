#pragma once
// AdamW with decoupled weight decay, written out so that its state is plain
// named tensors (checkpointed as safetensors) and so that bf16 parameters get
// fp32 master weights. One instance owns the optimizer state of one model.
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "train/optimizer.hpp"

namespace dflow::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// train.adam_beta1, adam_beta2, adam_eps and weight_decay.
AdamWOptions adamw_options(const config::TrainConfig& train);

class AdamW final : public Optimizer {
 public:
  // `params`: the trainable parameters by name (order is kept).
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options);

  void scale_grads(double scale) override;
  std::vector<torch::Tensor> grads() const override;
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_taken_; }
  // exp_avg.<name>, exp_avg_sq.<name>, master.<name> (bf16 parameters only).
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override;
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken) override;

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
