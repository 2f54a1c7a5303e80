#include "train/rollback_keeper.hpp"

#include <stdexcept>

namespace dflow::train {

namespace {

const char* const kSlots[] = {"candidate", "good"};

nlohmann::json description_of(const RollbackSnapshot& s) {
  return {{"completed_steps", s.completed_steps},
          {"optimizer_steps", s.optimizer_steps},
          {"guard", s.guard_state},
          {"parameters", s.parameters.size()}};
}

void add_tensors(const std::string& slot, const RollbackSnapshot& s, NamedTensors& out) {
  for (size_t i = 0; i < s.parameters.size(); ++i)
    out.emplace_back(slot + "/parameters/" + std::to_string(i), s.parameters[i].detach().to(torch::kCPU).clone());
  for (const auto& [name, t] : s.optimizer_state)
    out.emplace_back(slot + "/optimizer/" + name, t.to(torch::kCPU).clone());
}

RollbackSnapshot snapshot_from(const std::string& slot, const nlohmann::json& description,
                               const std::map<std::string, torch::Tensor>& tensors, const torch::Device& device) {
  RollbackSnapshot s;
  s.completed_steps = description.at("completed_steps").get<int64_t>();
  s.optimizer_steps = description.at("optimizer_steps").get<int64_t>();
  s.guard_state = description.at("guard");
  const auto count = description.at("parameters").get<size_t>();
  for (size_t i = 0; i < count; ++i) {
    const std::string name = slot + "/parameters/" + std::to_string(i);
    const auto it = tensors.find(name);
    if (it == tensors.end())
      throw std::runtime_error("the kept " + slot + " rollback snapshot lacks its tensor '" + name + "'");
    s.parameters.push_back(it->second.to(device));
  }
  const std::string prefix = slot + "/optimizer/";
  for (auto it = tensors.lower_bound(prefix); it != tensors.end() && it->first.rfind(prefix, 0) == 0; ++it)
    s.optimizer_state.emplace(it->first.substr(prefix.size()), it->second.to(device));
  return s;
}

}  // namespace

RollbackKeeper::RollbackKeeper(const config::GuardConfig& guard)
    : keeping_(guard.policy == "rollback"), snapshot_every_(guard.snapshot_every) {}

bool RollbackKeeper::candidate_due_at_start(int64_t completed_steps) {
  const bool first = !started_;
  started_ = true;
  return keeping_ && first && snapshot_every_ > 0 && completed_steps % snapshot_every_ == 0;
}

bool RollbackKeeper::candidate_due_after(int64_t completed_steps, const GuardVerdict& verdict, int cliff_run) const {
  return keeping_ && verdict.apply && cliff_run == 0 && snapshot_every_ > 0 && completed_steps % snapshot_every_ == 0;
}

void RollbackKeeper::keep_candidate(RollbackSnapshot snapshot) {
  if (keeping_) candidate_ = std::move(snapshot);
}

void RollbackKeeper::settle(int64_t step_index, const GuardVerdict& verdict) {
  const bool vouched = candidate_ && candidate_->completed_steps == step_index && verdict.kind.empty() &&
                       !verdict.above_cliff;
  if (vouched) {
    good_ = std::move(candidate_);
    std::erase_if(steps_since_good_, [&](const auto& step) { return step.first < good_->completed_steps; });
  }
  candidate_.reset();
}

void RollbackKeeper::step_taken(int64_t step_index, const std::vector<int64_t>& sample_ids) {
  if (keeping_) steps_since_good_.emplace_back(step_index, sample_ids);
}

RollbackUndo RollbackKeeper::roll_back() {
  if (!good_) throw std::logic_error("rollback: no good snapshot to go back to");
  RollbackUndo undo;
  undo.to_step = good_->completed_steps;
  for (const auto& [index, ids] : steps_since_good_) {
    undo.undone_steps.push_back(index + 1);
    undo.excluded_sample_ids.insert(undo.excluded_sample_ids.end(), ids.begin(), ids.end());
  }
  steps_since_good_.clear();
  candidate_.reset();
  return undo;
}

nlohmann::json RollbackKeeper::state() const {
  if (!keeping_) return nullptr;
  nlohmann::json out = {{"candidate", nullptr}, {"good", nullptr}, {"steps_since_good", nlohmann::json::array()}};
  if (candidate_) out["candidate"] = description_of(*candidate_);
  if (good_) out["good"] = description_of(*good_);
  for (const auto& [index, ids] : steps_since_good_)
    out["steps_since_good"].push_back({{"global_step", index + 1}, {"sample_ids", ids}});
  return out;
}

NamedTensors RollbackKeeper::tensors() const {
  torch::NoGradGuard no_grad;
  NamedTensors out;
  if (candidate_) add_tensors("candidate", *candidate_, out);
  if (good_) add_tensors("good", *good_, out);
  return out;
}

void RollbackKeeper::restore(const nlohmann::json& state, const std::map<std::string, torch::Tensor>& tensors,
                             const torch::Device& device) {
  candidate_.reset();
  good_.reset();
  steps_since_good_.clear();
  if (!keeping_ || !state.is_object()) return;  // nothing kept
  for (const std::string slot : kSlots) {
    if (!state.contains(slot) || state[slot].is_null()) continue;
    (slot == "good" ? good_ : candidate_) = snapshot_from(slot, state[slot], tensors, device);
  }
  for (const auto& step : state.value("steps_since_good", nlohmann::json::array()))
    steps_since_good_.emplace_back(step.at("global_step").get<int64_t>() - 1,
                                   step.at("sample_ids").get<std::vector<int64_t>>());
  started_ = true;
}

}  // namespace dflow::train
