// optimizer_step.adamw: one optimizer step per StepStats, with the model
// token and the trainable state it carries: normalise gradients by the step's
// total loss weight, global grad norm, stability guard, clipping, AdamW at
// the scheduled LR. Emits the step's exact record, a snapshot when a
// checkpoint is due (taken here, so it is always the state after step k and
// before k+1), a snapshot for the eval node when an evaluation is due
// (optional port), and the token.
//
// Guard policies act here too: quarantine records the skipped step's
// samples; rollback keeps in-memory snapshots and restores the last good one
// on a cliff before the token goes back to drafter_step.
#include <cmath>
#include <optional>

#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

using clock_type = std::chrono::steady_clock;

train::GuardSignal signal_of(const RunContext& run, const StepTotals& s, double loss, double grad_norm) {
  train::GuardSignal signal{loss, grad_norm, s.weight_sum <= 0, {}};
  for (size_t b = 0; b < s.bucket_weight_sum.size(); ++b)
    if (s.bucket_weight_sum[b] > 0) signal.bucket_losses[run.config.data.buckets.at(b)] = s.bucket_ce_sum[b] / s.bucket_weight_sum[b];
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
  OptimizerStep(const RunEnvironment& env, std::string name)
      : run_(env.run), journal_(env.journal), checkpoints_(env.checkpoints), name_(std::move(name)),
        rollback_(env.run.config.guard.policy == "rollback") {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& step = graph::payload<StepStats>(message);
    TrainableState& state = *step.token;
    const auto& totals = step.totals;
    const int64_t step_index = step.position.global_step;  // 0-based
    inject_node_faults(run_, name_, step_index);
    if (!started_) {
      // The state after the steps before this one: the first rollback candidate.
      started_ = true;
      take_candidate_if_due(state);
    }
    auto& optimizer = *state.optimizer;

    if (totals.weight_sum > 0) optimizer.scale_grads(1.0 / totals.weight_sum);
    const double grad_norm = optimizer.grad_norm();
    const double loss = totals.weight_sum > 0 ? totals.weighted_ce_sum / totals.weight_sum : 0.0;
    const double lr = state.schedule.lr_at(step_index);
    const auto signal = signal_of(run_, totals, loss, grad_norm);
    train::GuardVerdict guard = state.guard.decide(signal);
    if (rollback_) settle_candidate(step_index, guard);
    if (guard.apply) {
      optimizer.clip_grad_norm(run_.config.train.grad_clip, grad_norm);
      optimizer.step(lr);
      state.guard.record_applied(signal);
    }
    optimizer.zero_grad();
    if (auto* f = run_.fault("corrupt_weights", name_, step_index)) corrupt_weights(state, f->factor);

    nlohmann::json evidence = nlohmann::json::object();  // extra guard fields of the record
    if (rollback_) steps_since_good_.push_back({step_index, totals.sample_ids});
    if (guard.quarantine) {
      state.quarantine(run_, step_index + 1, guard.reason(), totals.sample_ids);
      evidence["quarantined_sample_ids"] = totals.sample_ids;
    }
    if (auto released = state.settle_pending_quarantine(run_, step_index + 1, guard, totals.sample_ids); !released.empty())
      evidence["released_sample_ids"] = std::move(released);
    if (guard.rollback && !good_) {
      guard.rollback = false, guard.halt = true, guard.action = "halted";  // nothing to go back to yet
      evidence["note"] = "no good snapshot yet (the first is validated one step after step " +
                         std::to_string(run_.config.guard.snapshot_every) + ")";
    }
    if (guard.rollback) evidence.update(roll_back(state, step_index, guard));
    if (!guard.kind.empty()) warn(step, guard, evidence);
    if (guard.rebaselined > 0) {
      evidence["rebaselined"] = guard.rebaselined;
      const std::string released = evidence.contains("released_sample_ids")
                                       ? log::str("; the ", evidence["released_sample_ids"].size(),
                                                  " sample(s) they quarantined are released")
                                       : "";
      log::warn("guard", log::str("step ", step.position.global_step + 1, ": ", guard.metric, " ", guard.value,
                                  " above the spike threshold ", guard.threshold, " for ", guard.rebaselined,
                                  " steps in a row: a new level, not a spike; applied, and those steps are ",
                                  guard.metric, "'s new baseline", released));
    }
    if (guard.halt) halt(state, step_index, guard);

    state.progress.complete_step(step.position, run_.batches_per_step());
    journal_.step_completed(state.progress.completed_steps);
    if (rollback_ && guard.apply && state.guard.cliff_run() == 0) take_candidate_if_due(state);

    StepRecord record = make_step_record(run_, step.position, totals, loss, grad_norm, lr, guard);
    record.guard.evidence = std::move(evidence);
    record.time = timing(state, step);
    if (at_cadence(run_.config.checkpoint.every_steps, state)) {
      // The checkpoint carries its step's record: written beside training, it
      // may be saved before that record reaches metrics.jsonl, and a crash
      // between the two would lose the record for good (a resume starts after it).
      Snapshot snapshot{state.snapshot(run_)};
      snapshot.state.run_state["step_record"] = record.to_json();
      out.emit("snapshot", graph::make_message(message.seq, 0, std::move(snapshot)));
    }
    if (out.connected("eval") && at_cadence(run_.config.eval.every_steps, state))
      out.emit("eval", graph::make_message(message.seq, 0, Snapshot{state.snapshot(run_)}));
    out.emit("record", graph::make_message(message.seq, 0, std::move(record)));
    out.emit("token", graph::make_message(message.seq, 0, std::move(step.token)));
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

  void take_candidate_if_due(const TrainableState& state) {
    if (rollback_ && state.progress.due(run_.config.guard.snapshot_every))
      candidate_ = state.take_rollback_snapshot();
  }

  // Restores the good snapshot; the samples of every step since it (their
  // updates are undone, and the update that caused the cliff is among them:
  // its own loss looks normal) are quarantined for the rest of the run and
  // for resumed runs. The data stream is not rewound and the step counter
  // goes on: global_step counts optimizer steps taken, whatever they did.
  nlohmann::json roll_back(TrainableState& state, int64_t step_index, const train::GuardVerdict& guard) {
    std::vector<int64_t> excluded, steps;
    for (const auto& [index, ids] : steps_since_good_) {
      steps.push_back(index + 1);
      excluded.insert(excluded.end(), ids.begin(), ids.end());
    }
    state.restore(*good_);
    state.quarantine(run_, step_index + 1, "rollback: " + guard.reason(), excluded);
    steps_since_good_.clear();
    candidate_.reset();
    return {{"from_step", step_index + 1},
            {"to_step", good_->completed_steps},
            {"rollbacks", state.guard.rollbacks()},
            {"max_rollbacks", run_.config.guard.max_rollbacks},
            {"undone_steps", steps},
            {"excluded_sample_ids", excluded}};
  }

  [[noreturn]] void halt(TrainableState& state, int64_t step_index, const train::GuardVerdict& guard) {
    // Policy halt: the state is still that after the previous step. Rollbacks
    // used up: the last good snapshot is what gets saved.
    if (rollback_ && good_) state.restore(*good_, /*count_as_rollback=*/false);
    // Every rank decides alike (the step's sums are global); rank 0 writes,
    // after any background write in progress, and nothing is written after it.
    fs::path dir = run_.checkpoints_dir / ("step-" + std::to_string(state.progress.completed_steps));
    if (run_.options.rank == 0) dir = checkpoints_.write_final(state.snapshot(run_));
    const std::string why = guard.kind == "cliff" ? " after " + std::to_string(state.guard.rollbacks()) +
                                                        " rollback(s) (guard.max_rollbacks)"
                                                  : "";
    throw std::runtime_error("guard policy '" + run_.config.guard.policy + "': " + guard.reason() + " at step " +
                             std::to_string(step_index + 1) + why + "; the state " +
                             (rollback_ && good_ ? "of the last good snapshot (step " + std::to_string(good_->completed_steps) + ")"
                                                 : std::string("before it")) +
                             " is saved in " + dir.string());
  }

  void warn(const StepStats& step, const train::GuardVerdict& guard, const nlohmann::json& evidence) const {
    std::string buckets;
    const auto& per_bucket = step.totals.batches_per_bucket;
    for (size_t b = 0; b < per_bucket.size(); ++b)
      if (per_bucket[b] > 0) buckets += (buckets.empty() ? "" : ",") + std::to_string(run_.config.data.buckets[b]);
    std::string line = log::str("step ", step.position.global_step + 1, ": ", guard.kind, ": ", guard.reason(),
                                " (value ", guard.value, ", threshold ", guard.threshold, ") -> ", guard.action,
                                " (policy ", run_.config.guard.policy, "); samples [", list_ids(step.totals.sample_ids),
                                "] lengths [", list_ids(step.totals.sample_lengths), "] bucket(s) [", buckets, "]");
    if (evidence.contains("to_step"))
      line += log::str("; rolled back to the state after step ", evidence["to_step"].get<int64_t>(), ", excluding ",
                       evidence["excluded_sample_ids"].size(), " sample(s) of steps since then");
    log::warn("guard", line);
  }

  static void corrupt_weights(TrainableState& state, double factor) {
    torch::NoGradGuard no_grad;
    for (auto& t : state.parameter_tensors()) t.mul_(factor);
    log::warn("faults", log::str("injected fault corrupt_weights: drafter parameters multiplied by ", factor));
  }

  // Checkpoints and evaluations: every `every` steps, and after the last step of the invocation.
  bool at_cadence(int every, const TrainableState& state) const {
    return state.progress.completed_steps == run_.stop_step || state.progress.due(every);
  }

  StepTiming timing(TrainableState& state, const StepStats& step) const {
    const auto now = clock_type::now();
    const auto since = state.last_step_end == clock_type::time_point{} ? run_.started_at : state.last_step_end;
    state.last_step_end = now;
    StepTiming t;
    t.step_s = std::chrono::duration<double>(now - since).count();
    t.elapsed_s = std::chrono::duration<double>(now - run_.started_at).count();
    t.tokens_per_s = t.step_s > 0 ? step.totals.real_tokens / t.step_s : 0.0;
    const int64_t done = state.progress.completed_steps;
    const int64_t done_here = done - run_.start.completed_steps;
    t.eta_s = done_here > 0 ? t.elapsed_s / done_here * static_cast<double>(run_.stop_step - done) : 0.0;
    if (!step.rank_busy_s.empty()) {
      // Each rank's time from its previous all-reduce to this one (its own
      // work); the slowest sets the pace, the others wait in the all-reduce.
      t.rank_step_s = step.rank_busy_s;
      t.slowest_rank = std::max_element(t.rank_step_s.begin(), t.rank_step_s.end()) - t.rank_step_s.begin();
      t.allreduce_s = step.allreduce_s;
    }
    return t;
  }

  const RunContext& run_;
  RunJournal& journal_;
  train::CheckpointWriter& checkpoints_;
  std::string name_;
  const bool rollback_;  // guard.policy == rollback: keep snapshots
  bool started_ = false;
  std::optional<RollbackSnapshot> candidate_, good_;
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
    return std::make_unique<OptimizerStep>(environment(context), context.name);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
