// optimizer_step.adamw: one optimizer step per StepStats, while holding the
// model token: normalise gradients by the step's total loss weight, global
// grad norm, stability guard, clipping, AdamW at the scheduled LR. Emits the
// step's exact record, a snapshot when a checkpoint is due (taken here, so
// it is always the state after step k and before k+1), a snapshot for the
// eval node when an evaluation is due (optional port), and the token.
//
// Guard policies act here too: quarantine records the skipped step's
// samples; rollback keeps in-memory snapshots and restores the last good one
// on a cliff before the token goes back to drafter_step.
#include <cmath>
#include <optional>

#include "config/log.hpp"
#include "nodes/good_snapshot.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "nodes/step_record.hpp"

namespace dflow::nodes {

namespace {

train::GuardSignal signal_of(const RunState& state, const LossSums& s, double loss, double grad_norm) {
  train::GuardSignal signal{loss, grad_norm, s.weight_sum <= 0, {}};
  for (size_t b = 0; b < s.bucket_weight_sum.size(); ++b)
    if (s.bucket_weight_sum[b] > 0) signal.bucket_losses[state.config.data.buckets.at(b)] = s.bucket_ce_sum[b] / s.bucket_weight_sum[b];
  return signal;
}

std::string list_ids(const std::vector<int64_t>& ids, size_t at_most = 12) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < at_most; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > at_most) out += ",... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

class OptimizerStep final : public graph::FunctionBody {
 public:
  OptimizerStep(RunState& state, std::string name)
      : state_(state), name_(std::move(name)), rollback_(state.config.guard.policy == "rollback") {
    take_candidate_if_due();
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& step = graph::payload<StepStats>(message);
    const int64_t step_index = step.position.global_step;  // 0-based
    inject_node_faults(state_, name_, step_index);
    auto& optimizer = *state_.optimizer;

    if (step.sums.weight_sum > 0) optimizer.scale_grads(1.0 / step.sums.weight_sum);
    const double grad_norm = optimizer.grad_norm();
    const double loss = step.sums.weight_sum > 0 ? step.sums.weighted_ce_sum / step.sums.weight_sum : 0.0;
    const double lr = state_.schedule.lr_at(step_index);
    const auto signal = signal_of(state_, step.sums, loss, grad_norm);
    train::GuardVerdict guard = state_.guard.decide(signal);
    if (rollback_) settle_candidate(step_index, guard);
    if (guard.apply) {
      optimizer.clip_grad_norm(state_.config.train.grad_clip, grad_norm);
      optimizer.step(lr);
      state_.guard.record_applied(signal);
    }
    optimizer.zero_grad();
    if (auto* f = state_.fault("corrupt_weights", name_, step_index)) corrupt_weights(f->factor);

    nlohmann::json evidence = nlohmann::json::object();  // extra guard fields of the record
    if (rollback_) steps_since_good_.push_back({step_index, step.sums.sample_ids});
    if (guard.quarantine) {
      state_.quarantine_samples(step_index + 1, guard.reason(), step.sums.sample_ids);
      evidence["quarantined_sample_ids"] = step.sums.sample_ids;
    }
    if (guard.rollback && !good_) {
      guard.rollback = false, guard.halt = true, guard.action = "halted";  // nothing to go back to yet
      evidence["note"] = "no good snapshot yet (the first is validated one step after step " +
                         std::to_string(state_.config.guard.snapshot_every) + ")";
    }
    if (guard.rollback) evidence.update(roll_back(step_index, guard));
    if (!guard.kind.empty()) warn(step, guard, evidence);
    if (guard.halt) halt(step_index, guard);

    advance_progress(step.position);
    if (rollback_ && guard.apply && state_.guard.cliff_run() == 0) take_candidate_if_due();

    auto record = make_step_record(state_, step, loss, grad_norm, lr, guard);
    if (!evidence.empty()) record["guard"].update(evidence);
    if (checkpoint_due()) out.emit("snapshot", graph::make_message(message.seq, 0, Snapshot{state_.snapshot()}));
    if (out.connected("eval") && eval_due()) out.emit("eval", graph::make_message(message.seq, 0, Snapshot{state_.snapshot()}));
    out.emit("record", graph::make_message(message.seq, 0, StepRecord{std::move(record)}));
    out.emit("token", graph::make_message(message.seq, 0, graph::Token{}));
  }

 private:
  // A candidate is the state after `completed_steps`; the next step's loss is
  // computed on exactly those weights, so it becomes the good snapshot when
  // that step is unremarkable, and is dropped otherwise (the update before it
  // may already have done the damage that shows only one step later).
  void settle_candidate(int64_t step_index, const train::GuardVerdict& guard) {
    if (!candidate_ || candidate_->completed_steps != step_index) return candidate_.reset();
    if (guard.kind.empty() && !guard.above_cliff) {
      good_ = std::move(candidate_);
      std::erase_if(steps_since_good_, [&](const auto& s) { return s.first < good_->completed_steps; });
    }
    candidate_.reset();
  }

  void take_candidate_if_due() {
    if (rollback_ && state_.completed_steps % state_.config.guard.snapshot_every == 0)
      candidate_ = GoodSnapshot::take(state_);
  }

  // Restores the good snapshot; the samples of every step since it (their
  // updates are undone, and the update that caused the cliff is among them:
  // its own loss looks normal) are quarantined for the rest of the run and
  // for resumed runs. The data stream is not rewound and the step counter
  // goes on: global_step counts optimizer steps taken, whatever they did.
  nlohmann::json roll_back(int64_t step_index, const train::GuardVerdict& guard) {
    std::vector<int64_t> excluded, steps;
    for (const auto& [index, ids] : steps_since_good_) {
      steps.push_back(index + 1);
      excluded.insert(excluded.end(), ids.begin(), ids.end());
    }
    good_->restore_into(state_);
    state_.quarantine_samples(step_index + 1, "rollback: " + guard.reason(), excluded);
    steps_since_good_.clear();
    candidate_.reset();
    return {{"from_step", step_index + 1},
            {"to_step", good_->completed_steps},
            {"rollbacks", state_.guard.rollbacks()},
            {"max_rollbacks", state_.config.guard.max_rollbacks},
            {"undone_steps", steps},
            {"excluded_sample_ids", excluded}};
  }

  [[noreturn]] void halt(int64_t step_index, const train::GuardVerdict& guard) {
    // Policy halt: the state is still that after the previous step. Rollbacks
    // used up: the last good snapshot is what gets saved.
    if (rollback_ && good_) good_->restore_into(state_, /*count_as_rollback=*/false);
    // Every rank decides alike (the step's sums are global); rank 0 writes.
    fs::path dir = state_.checkpoints_dir / ("step-" + std::to_string(state_.completed_steps));
    if (state_.options.rank == 0)
      dir = train::write_checkpoint(state_.checkpoints_dir, state_.snapshot(), state_.config.checkpoint.keep);
    const std::string why = guard.kind == "cliff" ? " after " + std::to_string(state_.guard.rollbacks()) +
                                                        " rollback(s) (guard.max_rollbacks)"
                                                  : "";
    throw std::runtime_error("guard policy '" + state_.config.guard.policy + "': " + guard.reason() + " at step " +
                             std::to_string(step_index + 1) + why + "; the state " +
                             (rollback_ && good_ ? "of the last good snapshot (step " + std::to_string(good_->completed_steps) + ")"
                                                 : std::string("before it")) +
                             " is saved in " + dir.string());
  }

  void warn(const StepStats& step, const train::GuardVerdict& guard, const nlohmann::json& evidence) const {
    std::string buckets;
    const auto& per_bucket = step.sums.batches_per_bucket;
    for (size_t b = 0; b < per_bucket.size(); ++b)
      if (per_bucket[b] > 0) buckets += (buckets.empty() ? "" : ",") + std::to_string(state_.config.data.buckets[b]);
    std::string line = log::str("step ", step.position.global_step + 1, ": ", guard.kind, ": ", guard.reason(),
                                " (value ", guard.value, ", threshold ", guard.threshold, ") -> ", guard.action,
                                " (policy ", state_.config.guard.policy, "); samples [", list_ids(step.sums.sample_ids),
                                "] lengths [", list_ids(step.sums.sample_lengths), "] bucket(s) [", buckets, "]");
    if (evidence.contains("to_step"))
      line += log::str("; rolled back to the state after step ", evidence["to_step"].get<int64_t>(), ", excluding ",
                       evidence["excluded_sample_ids"].size(), " sample(s) of steps since then");
    log::warn("guard", line);
  }

  void corrupt_weights(double factor) {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : state_.drafter_parameters()) p.mul_(factor);
    log::warn("faults", log::str("injected fault corrupt_weights: drafter parameters multiplied by ", factor));
  }

  void advance_progress(const StepPosition& position) {
    state_.completed_steps = position.global_step + 1;
    const int64_t batches_per_step = int64_t{state_.options.world_size} * state_.config.train.grad_accum;
    const int64_t next_batch = (position.step_in_epoch + 1) * batches_per_step;
    if (position.step_in_epoch + 1 >= position.steps_per_epoch)
      state_.cursor = data::PlanCursor{position.epoch + 1, 0};
    else
      state_.cursor = data::PlanCursor{position.epoch, next_batch};
  }

  bool checkpoint_due() const {
    const int every = state_.config.checkpoint.every_steps;
    return state_.completed_steps == state_.stop_step || (every > 0 && state_.completed_steps % every == 0);
  }

  bool eval_due() const {
    const int every = state_.config.eval.every_steps;
    return state_.completed_steps == state_.stop_step || (every > 0 && state_.completed_steps % every == 0);
  }

  RunState& state_;
  std::string name_;
  const bool rollback_;  // guard.policy == rollback: keep snapshots
  std::optional<GoodSnapshot> candidate_, good_;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> steps_since_good_;  // (step index, its samples)
};

}  // namespace

void register_optimizer_step(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "optimizer_step.adamw";
  spec.description = "grad norm, guard (skip, quarantine, rollback), clipping, AdamW at the scheduled LR; one record "
                     "per step; snapshots";
  spec.inputs = {{"in", "StepStats"}};
  spec.outputs = {{"token", "ModelToken"},
                  {"record", "StepRecord"},
                  {"snapshot", "Snapshot", false, false, true},
                  {"eval", "Snapshot", false, false, true}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<OptimizerStep>(run_state(context), context.name);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
