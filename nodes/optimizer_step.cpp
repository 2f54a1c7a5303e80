// optimizer_step.adamw: one optimizer step per StepStats, while holding the
// model token: normalise gradients by the step's total loss weight, global
// grad norm, stability guard, clipping, AdamW at the scheduled LR. Emits the
// step's exact record, a snapshot when a checkpoint is due (taken here, so
// it is always the state after step k and before k+1), a snapshot for the
// eval node when an evaluation is due (optional port), and the token.
#include <cmath>

#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "nodes/step_record.hpp"

namespace dflow::nodes {

namespace {

class OptimizerStep final : public graph::FunctionBody {
 public:
  OptimizerStep(RunState& state, std::string name) : state_(state), name_(std::move(name)) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& step = graph::payload<StepStats>(message);
    inject_node_faults(state_, name_, step.position.global_step);
    auto& optimizer = *state_.optimizer;

    if (step.sums.weight_sum > 0) optimizer.scale_grads(1.0 / step.sums.weight_sum);
    const double grad_norm = optimizer.grad_norm();
    const double loss = step.sums.weight_sum > 0 ? step.sums.weighted_ce_sum / step.sums.weight_sum : 0.0;
    const double lr = state_.schedule.lr_at(step.position.global_step);
    const train::GuardVerdict guard = state_.guard.check(loss, grad_norm);
    if (guard.apply) {
      optimizer.clip_grad_norm(state_.config.train.grad_clip, grad_norm);
      optimizer.step(lr);
      state_.guard.record_applied(loss, grad_norm);
    } else {
      log::warn("guard", log::str("step ", step.position.global_step + 1, ": ", guard.reason(), " -> update ",
                                  guard.action, " (policy ", state_.config.guard.policy, ", ",
                                  step.sums.sample_ids.size(), " samples)"));
    }
    optimizer.zero_grad();
    if (guard.halt) {
      // The state is still that after the previous step: save it, then stop.
      auto dir = train::write_checkpoint(state_.checkpoints_dir, state_.snapshot(), state_.config.checkpoint.keep);
      throw std::runtime_error("guard policy 'halt': " + guard.reason() + " at step " +
                               std::to_string(step.position.global_step + 1) + "; the state before it is saved in " +
                               dir.string());
    }
    advance_progress(step.position);

    auto record = make_step_record(state_, step, loss, grad_norm, lr, guard);
    if (checkpoint_due()) out.emit("snapshot", graph::make_message(message.seq, 0, Snapshot{state_.snapshot()}));
    if (out.connected("eval") && eval_due()) out.emit("eval", graph::make_message(message.seq, 0, Snapshot{state_.snapshot()}));
    out.emit("record", graph::make_message(message.seq, 0, StepRecord{std::move(record)}));
    out.emit("token", graph::make_message(message.seq, 0, graph::Token{}));
  }

 private:
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
};

}  // namespace

void register_optimizer_step(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "optimizer_step.adamw";
  spec.description = "grad norm, guard, clipping, AdamW at the scheduled LR; one record per step; snapshots";
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
