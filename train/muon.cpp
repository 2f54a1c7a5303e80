#include "train/muon.hpp"

#include <cmath>
#include <stdexcept>

#include "drafter/kind.hpp"
#include "drafter/learning_rate_scale.hpp"

namespace dflow::train {

bool is_hidden_matrix(const std::string& name, const torch::Tensor& param) {
  // The embedding and LM head, and what the drafter kinds say (their
  // lookup tables, vocabulary projections and one-row outputs: none a
  // hidden matrix, DrafterKind::adamw_parameters).
  for (const char* not_hidden : {"embed", "lm_head"})
    if (name.find(not_hidden) != std::string::npos) return false;
  for (const auto& not_hidden : drafter::adamw_parameter_fragments())
    if (name.find(not_hidden) != std::string::npos) return false;
  return param.dim() == 2;
}

torch::Tensor newton_schulz_orthogonalise(const torch::Tensor& update, const MuonOptions& options) {
  const auto [a, b, c] = options.ns_coefficients;
  const bool tall = update.size(0) > update.size(1);
  torch::Tensor x = update.to(torch::kBFloat16, /*non_blocking=*/false, /*copy=*/true);
  if (tall) x = x.t();
  x.div_(x.norm().clamp_min(options.eps));  // spectral norm at most 1
  for (int i = 0; i < options.ns_steps; ++i) {
    const torch::Tensor gram = x.matmul(x.t());
    const torch::Tensor gram_update = torch::addmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = torch::addmm(x, gram_update, x, /*beta=*/a);
  }
  return tall ? x.t() : x;
}

Muon::Muon(std::vector<std::pair<std::string, torch::Tensor>> params, MuonOptions options, AdamWOptions adamw,
           double base_lr)
    : options_(options), base_lr_(base_lr) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> rest;
  for (auto& [name, p] : params) {
    if (!is_hidden_matrix(name, p)) {
      adamw_names_.push_back(name);
      rest.emplace_back(name, p);
      continue;
    }
    Slot s;
    s.name = name;
    s.param = p;
    if (p.scalar_type() != torch::kFloat32) s.master = p.detach().to(torch::kFloat32).clone();
    s.momentum = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat32));
    slots_.push_back(std::move(s));
  }
  if (slots_.empty())
    throw std::invalid_argument("Muon needs 2-D hidden weights, and none of the " + std::to_string(params.size()) +
                                " trainable parameters is one (1-D, an embedding or an LM head): use AdamW");
  if (!rest.empty()) adamw_ = std::make_unique<AdamW>(std::move(rest), adamw);
}

std::vector<std::string> Muon::muon_names() const {
  std::vector<std::string> out;
  for (const auto& s : slots_) out.push_back(s.name);
  return out;
}

void Muon::scale_grads(double scale) {
  torch::NoGradGuard no_grad;
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad().mul_(scale);
  if (adamw_) adamw_->scale_grads(scale);
}

std::vector<torch::Tensor> Muon::grads() const {
  std::vector<torch::Tensor> out = adamw_ ? adamw_->grads() : std::vector<torch::Tensor>{};
  for (const auto& s : slots_) out.push_back(s.param.grad());
  return out;
}

void Muon::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  const double muon_lr = base_lr_ > 0 ? options_.lr * lr / base_lr_ : 0.0;
  for (auto& s : slots_) {
    if (!s.param.grad().defined()) continue;
    torch::Tensor weights = s.master.defined() ? s.master : s.param;
    const torch::Tensor grad = s.param.grad().to(torch::kFloat32);
    s.momentum.lerp_(grad, 1.0 - options_.momentum);
    const torch::Tensor update =
        newton_schulz_orthogonalise(options_.nesterov ? grad.lerp(s.momentum, options_.momentum) : s.momentum, options_);
    const double rows = static_cast<double>(s.param.size(0)), cols = static_cast<double>(s.param.size(1));
    // The drafter kind's factor for this parameter (drafter/learning_rate_scale.hpp).
    const double slot_lr = muon_lr * drafter::learning_rate_scale(s.name, s.param);
    const double adjusted_lr = slot_lr * std::sqrt(std::max(1.0, rows / cols));
    weights.mul_(1.0 - slot_lr * options_.weight_decay);
    weights.add_(update, -adjusted_lr);
    if (s.master.defined()) s.param.copy_(s.master);
  }
  if (adamw_) adamw_->step(lr);
}

void Muon::zero_grad() {
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad().zero_();
  if (adamw_) adamw_->zero_grad();
}

std::vector<std::pair<std::string, torch::Tensor>> Muon::state_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& s : slots_) {
    out.emplace_back("muon_momentum." + s.name, s.momentum);
    if (s.master.defined()) out.emplace_back("muon_master." + s.name, s.master);
  }
  if (adamw_)
    for (auto& entry : adamw_->state_tensors()) out.push_back(std::move(entry));
  return out;
}

void Muon::load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken) {
  torch::NoGradGuard no_grad;
  auto fetch = [&](const std::string& key, const torch::Tensor& like) {
    auto it = state.find(key);
    if (it == state.end())
      throw std::runtime_error("optimizer state is missing '" + key + "' (was the checkpoint written by another optimizer?)");
    if (it->second.sizes() != like.sizes()) throw std::runtime_error("optimizer state '" + key + "' has the wrong shape");
    return it->second;
  };
  for (auto& s : slots_) {
    s.momentum.copy_(fetch("muon_momentum." + s.name, s.momentum));
    if (s.master.defined()) s.master.copy_(fetch("muon_master." + s.name, s.master));
  }
  if (adamw_) adamw_->load_state_tensors(state, steps_taken);
  steps_taken_ = steps_taken;
}

}  // namespace dflow::train
