#pragma once
// In-memory snapshots for guard policy rollback: the drafter's parameters,
// the optimizer state and the guard state after some step, kept on the
// drafter's device (a copy, about three times the parameters' size). Taken
// and restored only by optimizer_step, which holds the model token, so the
// next micro-batch of drafter_step runs on the restored weights.
#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nodes/run_state.hpp"

namespace dflow::nodes {

struct GoodSnapshot {
  int64_t completed_steps = 0;  // the state after this many steps
  std::vector<torch::Tensor> parameters;  // drafter_parameters() order
  std::map<std::string, torch::Tensor> optimizer_state;
  int64_t optimizer_steps = 0;
  nlohmann::json guard_state;

  static GoodSnapshot take(const RunState& state) {
    torch::NoGradGuard no_grad;
    GoodSnapshot s;
    s.completed_steps = state.completed_steps;
    for (const auto& [name, t] : state.drafter_parameters()) s.parameters.push_back(t.detach().clone());
    for (const auto& [name, t] : state.optimizer->state_tensors()) s.optimizer_state.emplace(name, t.clone());
    s.optimizer_steps = state.optimizer->steps_taken();
    s.guard_state = state.guard.state();
    return s;
  }

  // Parameters and optimizer state back to the snapshot's; the guard's
  // baseline too. A rollback is counted (the count itself is never rolled
  // back); a halt that saves the snapshot is not a rollback.
  void restore_into(RunState& state, bool count_as_rollback = true) const {
    torch::NoGradGuard no_grad;
    auto params = state.drafter_parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(parameters.at(i));
    state.optimizer->load_state_tensors(optimizer_state, optimizer_steps);
    const int rollbacks = state.guard.rollbacks() + (count_as_rollback ? 1 : 0);
    state.guard.restore_after_rollback(guard_state, rollbacks);
  }
};

}  // namespace dflow::nodes
