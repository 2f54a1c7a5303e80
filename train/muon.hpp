#pragma once
// Muon (momentum orthogonalised by Newton-Schulz) for the drafter's hidden
// matrices, AdamW for every other parameter (norms, biases, embeddings, an
// LM head if trained), each group with its own learning rate and weight
// decay. The Muon update is torch.optim.Muon's: Nesterov momentum 0.95, five
// quintic Newton-Schulz steps (3.4445, -4.775, 2.0315) in bfloat16 on the
// momentum normalised by its Frobenius norm, the learning rate scaled by
// sqrt(max(1, rows / cols)), decoupled weight decay. bf16 parameters get
// fp32 master weights in both groups.
#include <array>
#include <functional>
#include <memory>

#include "train/adamw.hpp"
#include "train/optimizer.hpp"

namespace dflow::train {

struct MuonOptions {
  double lr = 0.02;            // the Muon group's peak learning rate (the schedule scales it like train.lr)
  double weight_decay = 0.01;  // the Muon group's decoupled weight decay
  double momentum = 0.95;
  bool nesterov = true;
  std::array<double, 3> ns_coefficients{3.4445, -4.775, 2.0315};
  int ns_steps = 5;
  double eps = 1e-7;
};

// The parameters Muon updates: 2-D weights that are not an embedding or an
// LM head (by name: "embed", "lm_head", and the fragments the drafter kinds
// name: drafter::adamw_parameter_fragments).
bool is_hidden_matrix(const std::string& name, const torch::Tensor& param);

class Muon final : public Optimizer {
 public:
  // `params` by name; those for which is_hidden_matrix holds go to Muon,
  // the rest to AdamW (`adamw`, at the scheduled lr). `base_lr` is the
  // AdamW group's peak lr (train.lr): the Muon group's lr at a step is
  // options.lr * lr / base_lr. Throws std::invalid_argument when no
  // parameter is a hidden matrix.
  Muon(std::vector<std::pair<std::string, torch::Tensor>> params, MuonOptions options, AdamWOptions adamw,
       double base_lr);

  void scale_grads(double scale) override;
  std::vector<torch::Tensor> grads() const override;
  void step(double lr) override;
  void zero_grad() override;
  int64_t steps_taken() const override { return steps_taken_; }
  // muon_momentum.<name>, muon_master.<name> (bf16 only), and the AdamW
  // group's exp_avg.<name>, exp_avg_sq.<name>, master.<name>.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override;
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken) override;

  // The names in each group, in order.
  std::vector<std::string> muon_names() const;
  std::vector<std::string> adamw_names() const { return adamw_names_; }

 private:
  struct Slot {
    std::string name;
    torch::Tensor param;     // the model's parameter
    torch::Tensor master;    // fp32 copy when param is not fp32
    torch::Tensor momentum;  // fp32, like param
  };
  std::vector<Slot> slots_;
  std::unique_ptr<AdamW> adamw_;  // null when every parameter is a hidden matrix
  std::vector<std::string> adamw_names_;
  MuonOptions options_;
  double base_lr_;
  int64_t steps_taken_ = 0;
};

// torch.optim.Muon's orthogonalisation of one 2-D update (bfloat16 result).
torch::Tensor newton_schulz_orthogonalise(const torch::Tensor& update, const MuonOptions& options);

}  // namespace dflow::train
