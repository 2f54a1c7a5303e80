#include "train/adamw.hpp"

#include <cmath>
#include <stdexcept>

#include "drafter/learning_rate_scale.hpp"

namespace dflow::train {

AdamWOptions adamw_options(const config::TrainConfig& train) {
  AdamWOptions o;
  o.beta1 = train.adam_beta1;
  o.beta2 = train.adam_beta2;
  o.eps = train.adam_eps;
  o.weight_decay = train.weight_decay;
  return o;
}

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options) : options_(options) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params) {
    Slot s;
    s.name = name;
    s.param = p;
    if (p.scalar_type() != torch::kFloat32) s.master = p.detach().to(torch::kFloat32).clone();
    s.exp_avg = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat32));
    s.exp_avg_sq = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat32));
    slots_.push_back(std::move(s));
  }
}

void AdamW::scale_grads(double scale) {
  torch::NoGradGuard no_grad;
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad().mul_(scale);
}

std::vector<torch::Tensor> AdamW::grads() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : slots_) out.push_back(s.param.grad());
  return out;
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_taken_));
  const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_taken_));
  for (auto& s : slots_) {
    if (!s.param.grad().defined()) continue;
    torch::Tensor weights = s.master.defined() ? s.master : s.param;
    torch::Tensor grad = s.param.grad().to(torch::kFloat32);
    // The drafter kind's factor for this parameter (drafter/learning_rate_scale.hpp).
    const double slot_lr = lr * drafter::learning_rate_scale(s.name, s.param);
    if (options_.weight_decay > 0) weights.mul_(1.0 - slot_lr * options_.weight_decay);
    s.exp_avg.mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
    s.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    torch::Tensor denom = (s.exp_avg_sq / bias2).sqrt_().add_(options_.eps);
    weights.addcdiv_(s.exp_avg, denom, -slot_lr / bias1);
    if (s.master.defined()) s.param.copy_(s.master);
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad().zero_();
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
    if (s.master.defined()) out.emplace_back("master." + s.name, s.master);
  }
  return out;
}

void AdamW::load_state_tensors(const std::map<std::string, torch::Tensor>& state, int64_t steps_taken) {
  torch::NoGradGuard no_grad;
  auto fetch = [&](const std::string& key, const torch::Tensor& like) {
    auto it = state.find(key);
    if (it == state.end()) throw std::runtime_error("optimizer state is missing '" + key + "'");
    if (it->second.sizes() != like.sizes())
      throw std::runtime_error("optimizer state '" + key + "' has the wrong shape");
    return it->second;
  };
  for (auto& s : slots_) {
    s.exp_avg.copy_(fetch("exp_avg." + s.name, s.exp_avg));
    s.exp_avg_sq.copy_(fetch("exp_avg_sq." + s.name, s.exp_avg_sq));
    if (s.master.defined()) s.master.copy_(fetch("master." + s.name, s.master));
  }
  steps_taken_ = steps_taken;
}

}  // namespace dflow::train
