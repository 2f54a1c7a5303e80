#include "nodes/trainable_state.hpp"

#include <algorithm>

#include "config/errors.hpp"

namespace dflow::nodes {

namespace {

// The steps the LR schedule spans: the run's, epochs x steps per epoch, or
// run.max_steps when that ends the run sooner (so a short run warms up and
// decays within itself, as in other trainers). Fixed when the run starts: a
// resume continues the checkpoint's schedule (older checkpoints spanned
// total_steps), since another length would change every later step's LR.
int64_t schedule_steps(const RunContext& run, const train::LoadedCheckpoint* resume) {
  if (resume) return resume->run_state.value("schedule_steps", resume->run_state.value("total_steps", run.total_steps));
  const int64_t max_steps = run.config.run.max_steps;
  return max_steps > 0 ? std::min(max_steps, run.total_steps) : run.total_steps;
}

}  // namespace

TrainableState::TrainableState(const RunContext& run, const train::LoadedCheckpoint* resume) : guard(run.config.guard), rollback(run.config.guard) {
  const auto& config = run.config;
  drafter = drafter::DFlashDrafter(run.drafter_spec, config.run.seed);
  drafter->to(run.drafter_device, run.drafter_dtype);
  // What the kind derives from the target's LM head (a resume then restores
  // the checkpoint's own, with the trained modules that read them).
  drafter->kind_modules().initialize_from_head(run.target_head->lm_head_weight());
  optimizer = run.make_optimizer(parameters());
  schedule.peak_lr = config.train.lr;
  schedule.total_steps = schedule_steps(run, resume);
  if (resume && run.stop_step > schedule.total_steps)
    throw ConfigError("checkpoint " + resume->dir.string() + ": the run's LR schedule ends at step " +
                      std::to_string(schedule.total_steps) +
                      " (set by run.max_steps when the run started), but this run would train to step " +
                      std::to_string(run.stop_step) + ", past its end: resume with run.max_steps " +
                      std::to_string(schedule.total_steps) + " or less, or start a new run for a longer schedule");
  schedule.warmup_ratio = config.train.warmup_ratio;
  schedule.kind = config.train.schedule;
  progress = run.start;
  quarantined = run.quarantined_at_start;
  if (resume) restore(*resume);
}

std::vector<std::pair<std::string, torch::Tensor>> TrainableState::parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : drafter->named_parameters(true))
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<torch::Tensor> TrainableState::parameter_tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : parameters()) out.push_back(t);
  return out;
}

std::vector<torch::Tensor> TrainableState::drafter_tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& item : drafter->named_parameters(true)) out.push_back(item.value());
  for (const auto& item : drafter->named_buffers(true)) out.push_back(item.value());
  return out;
}

train::CheckpointState TrainableState::snapshot(const RunContext& run) const {
  torch::NoGradGuard no_grad;
  train::CheckpointState s;
  s.global_step = progress.completed_steps;
  if (run.options.rank != 0) return s;
  s.config_yaml = run.config_yaml;
  const auto named = parameters();
  // Every parameter, the frozen ones a kind derives (DSpine's codes) included.
  for (const auto& item : drafter->named_parameters(true))
    s.drafter_tensors.emplace_back(item.key(), item.value().detach().to(torch::kCPU).clone());
  s.drafter_config = drafter::drafter_config_json(drafter->spec(), named.front().second.scalar_type());
  s.trained_against = run.trained_against;
  for (const auto& [name, t] : optimizer->state_tensors()) s.optimizer_tensors.emplace_back(name, t.to(torch::kCPU).clone());
  s.optimizer_steps = optimizer->steps_taken();
  s.run_state = progress.to_json();
  s.run_state.update({{"steps_per_epoch", run.steps_per_epoch},
                      {"total_steps", run.total_steps},
                      {"schedule_steps", schedule.total_steps},
                      {"world_size", run.options.world_size},
                      {"guard", guard.state()},
                      {"quarantine", std::vector<int64_t>(quarantined.begin(), quarantined.end())},
                      {"quarantine_pending", quarantine_pending}});
  if (rollback.keeping()) {
    s.run_state["rollback"] = rollback.state();
    s.rollback_tensors = rollback.tensors();
  }
  return s;
}

void TrainableState::restore(const train::LoadedCheckpoint& ckpt) {
  torch::NoGradGuard no_grad;
  for (auto& [name, param] : parameters()) {
    auto it = ckpt.drafter_tensors.find(name);
    if (it == ckpt.drafter_tensors.end()) throw std::runtime_error("checkpoint " + ckpt.dir.string() + " lacks " + name);
    param.copy_(it->second);
  }
  for (auto& item : drafter->named_parameters(true)) {
    if (item.value().requires_grad()) continue;
    const auto it = ckpt.drafter_tensors.find(item.key());
    if (it == ckpt.drafter_tensors.end())
      throw std::runtime_error("checkpoint " + ckpt.dir.string() + " lacks " + item.key() + " (its drafter kind's "
                               "fixed tensor, which the trained modules were fitted to)");
    item.value().copy_(it->second);
  }
  optimizer->load_state_tensors(ckpt.optimizer_tensors, ckpt.optimizer_steps);
  guard.restore(ckpt.run_state.value("guard", nlohmann::json::object()));
  // Left to drafter_step, not the loader (RunContext::start_from): a release may still come.
  quarantine_pending = ckpt.run_state.value("quarantine_pending", std::vector<int64_t>{});
  quarantined.insert(quarantine_pending.begin(), quarantine_pending.end());
  // Kept on the drafter's device, like the snapshots the run took itself.
  try {
    rollback.restore(ckpt.run_state.value("rollback", nlohmann::json()), ckpt.rollback_tensors,
                     parameters().front().second.device());
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + ckpt.dir.string() + ": " + e.what());
  }
}

void TrainableState::quarantine(const RunContext& run, int64_t global_step, const std::string& reason,
                                const std::vector<int64_t>& ids) {
  quarantined.insert(ids.begin(), ids.end());
  if (run.options.rank == 0) data::append_quarantine(run.quarantine_path, global_step, reason, ids);
}

std::vector<int64_t> TrainableState::settle_pending_quarantine(const RunContext& run, int64_t global_step,
                                                               const train::GuardVerdict& verdict,
                                                               const std::vector<int64_t>& sample_ids) {
  std::vector<int64_t> released;
  if (verdict.rebaselined > 0 && !quarantine_pending.empty()) {
    released = std::move(quarantine_pending);
    for (int64_t id : released) quarantined.erase(id);
    if (run.options.rank == 0)
      data::append_release(run.quarantine_path, global_step,
                           "released: " + verdict.metric + " above its spike threshold for " +
                               std::to_string(verdict.rebaselined) + " steps in a row is its new level",
                           released);
  }
  if (verdict.quarantine && verdict.spike_run > 1) {
    quarantine_pending.insert(quarantine_pending.end(), sample_ids.begin(), sample_ids.end());
  } else {
    // The run is over (what it quarantined stays so), or this spike starts one.
    quarantine_pending.clear();
    if (verdict.quarantine && verdict.spike_run == 1) quarantine_pending = sample_ids;
  }
  return released;
}

RollbackSnapshot TrainableState::take_rollback_snapshot() const {
  torch::NoGradGuard no_grad;
  RollbackSnapshot s;
  s.completed_steps = progress.completed_steps;
  for (const auto& [name, t] : parameters()) s.parameters.push_back(t.detach().clone());
  for (const auto& [name, t] : optimizer->state_tensors()) s.optimizer_state.emplace(name, t.clone());
  s.optimizer_steps = optimizer->steps_taken();
  s.guard_state = guard.state();
  return s;
}

void TrainableState::restore(const RollbackSnapshot& snapshot, bool count_as_rollback) {
  torch::NoGradGuard no_grad;
  auto params = parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(snapshot.parameters.at(i));
  optimizer->load_state_tensors(snapshot.optimizer_state, snapshot.optimizer_steps);
  guard.restore_after_rollback(snapshot.guard_state, guard.rollbacks() + (count_as_rollback ? 1 : 0));
}

}  // namespace dflow::nodes
