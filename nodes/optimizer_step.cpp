// optimizer_step.adamw and optimizer_step.muon: one optimizer step per
// StepStats, with the model token and the trainable state it carries:
// normalise gradients by the step's total loss weight, global grad norm,
// stability guard, clipping, the optimizer the node type picked
// (nodes/optimizers.hpp) at the scheduled LR. Emits the step's exact record, a snapshot when a
// checkpoint is due (taken here, so it is always the state after step k and
// before k+1), a snapshot for the eval node when an evaluation is due
// (optional port), and the token.
//
// Guard policies act here too: quarantine records the skipped step's
// samples; rollback restores the last good snapshot the trainable state
// keeps (train/rollback_keeper.hpp) on a cliff, before the token goes back
// to drafter_step.
#include <sys/resource.h>

#include <cmath>

#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/optimizers.hpp"
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
  for (size_t i = 0; i < ids.size() && i < at_most; ++i) out.append(i ? "," : "").append(std::to_string(ids[i]));
  if (ids.size() > at_most) out += ",... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

class OptimizerStep final : public graph::FunctionBody {
 public:
  OptimizerStep(const RunEnvironment& env, std::string name)
      : run_(env.run), journal_(env.journal), checkpoints_(env.checkpoints), name_(std::move(name)) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& step = graph::payload<StepStats>(message);
    TrainableState& state = *step.token;
    inject_node_faults(run_, name_, step.position.global_step);
    StepDecision decision = decide(step, state);
    apply(step, state, decision);
    emit(message.seq, step, state, record(step, state, decision), out);
  }

 private:
  // One step's numbers and the guard's verdict on them; carrying the verdict
  // out adds its evidence (the record's extra guard fields).
  struct StepDecision {
    double loss = 0, grad_norm = 0, lr = 0;
    train::GuardSignal signal;
    train::GuardVerdict verdict;
    nlohmann::json evidence = nlohmann::json::object();
  };

  // Gradients normalised by the step's total loss weight, the global grad
  // norm, the scheduled LR, and the guard's verdict, which also settles the
  // rollback candidate the step was computed on.
  StepDecision decide(const StepStats& step, TrainableState& state) const {
    const auto& totals = step.totals;
    const int64_t step_index = step.position.global_step;  // 0-based
    // The state after the steps before this one: the first rollback candidate.
    if (state.rollback.candidate_due_at_start(state.progress.completed_steps))
      state.rollback.keep_candidate(state.take_rollback_snapshot());
    auto& optimizer = *state.optimizer;
    if (totals.weight_sum > 0) optimizer.scale_grads(1.0 / totals.weight_sum);
    StepDecision d;
    d.grad_norm = optimizer.grad_norm();
    d.loss = totals.weight_sum > 0 ? totals.weighted_ce_sum / totals.weight_sum : 0.0;
    d.lr = state.schedule.lr_at(step_index);
    d.signal = signal_of(run_, totals, d.loss, d.grad_norm);
    d.verdict = state.guard.decide(d.signal);
    state.rollback.settle(step_index, d.verdict);
    return d;
  }

  // The update (when the verdict applies it), what the policy does with an
  // event (quarantine, rollback, halt), then the step is complete.
  void apply(const StepStats& step, TrainableState& state, StepDecision& d) {
    update(step, state, d);
    carry_out_verdict(step, state, d);
    state.progress.complete_step(step.position, run_.batches_per_step());
    journal_.step_completed(state.progress.completed_steps);
    if (state.rollback.candidate_due_after(state.progress.completed_steps, d.verdict, state.guard.cliff_run()))
      state.rollback.keep_candidate(state.take_rollback_snapshot());
  }

  void update(const StepStats& step, TrainableState& state, const StepDecision& d) const {
    const int64_t step_index = step.position.global_step;
    auto& optimizer = *state.optimizer;
    if (d.verdict.apply) {
      optimizer.clip_grad_norm(run_.config.train.grad_clip, d.grad_norm);
      optimizer.step(d.lr);
      state.guard.record_applied(d.signal);
    }
    optimizer.zero_grad();
    if (auto* f = run_.fault("corrupt_weights", name_, step_index)) corrupt_weights(state, f->factor);
    state.rollback.step_taken(step_index, step.totals.sample_ids);
  }

  void carry_out_verdict(const StepStats& step, TrainableState& state, StepDecision& d) {
    const int64_t step_index = step.position.global_step;
    const auto& sample_ids = step.totals.sample_ids;
    auto& verdict = d.verdict;
    if (verdict.quarantine) {
      state.quarantine(run_, step_index + 1, verdict.reason(), sample_ids);
      d.evidence["quarantined_sample_ids"] = sample_ids;
    }
    if (auto released = state.settle_pending_quarantine(run_, step_index + 1, verdict, sample_ids); !released.empty())
      d.evidence["released_sample_ids"] = std::move(released);
    if (verdict.rollback && !state.rollback.good()) {
      verdict.escalate_to_halt();
      d.evidence["note"] = "no good snapshot yet (the first is validated one step after step " +
                           std::to_string(run_.config.guard.snapshot_every) + ")";
    }
    if (verdict.rollback) d.evidence.update(roll_back(state, step_index, verdict));
    if (!verdict.kind.empty()) warn(step, verdict, d.evidence);
    if (verdict.rebaselined > 0) {
      d.evidence["rebaselined"] = verdict.rebaselined;
      warn_new_level(step, d);
    }
    if (verdict.halt) halt(state, step_index, verdict);
  }

  StepRecord record(const StepStats& step, TrainableState& state, StepDecision& d) const {
    StepRecord out = make_step_record(run_, step.position, state.schedule.total_steps, step.totals, d.loss,
                                      d.grad_norm, d.lr, d.verdict);
    out.guard.evidence = std::move(d.evidence);
    out.time = timing(state, step);
    return out;
  }

  void emit(uint64_t seq, StepStats& step, const TrainableState& state, StepRecord step_record,
            graph::Emitter& out) const {
    if (at_cadence(run_.config.checkpoint.every_steps, state)) {
      // The checkpoint carries its step's record: written beside training, it
      // may be saved before that record reaches metrics.jsonl, and a crash
      // between the two would lose the record for good (a resume starts after it).
      Snapshot snapshot{state.snapshot(run_)};
      snapshot.state.run_state["step_record"] = step_record.to_json();
      out.emit("snapshot", graph::make_message(seq, 0, std::move(snapshot)));
    }
    if (out.connected("eval") && at_cadence(run_.config.eval.every_steps, state))
      out.emit("eval", graph::make_message(seq, 0, Snapshot{state.snapshot(run_)}));
    out.emit("record", graph::make_message(seq, 0, std::move(step_record)));
    out.emit("token", graph::make_message(seq, 0, std::move(step.token)));
  }

  // Restores the good snapshot; the samples of every step since it (their
  // updates are undone, and the update that caused the cliff is among them:
  // its own loss looks normal) are quarantined for the rest of the run and
  // for resumed runs. The data stream is not rewound and the step counter
  // goes on: global_step counts optimizer steps taken, whatever they did.
  nlohmann::json roll_back(TrainableState& state, int64_t step_index, const train::GuardVerdict& verdict) {
    const train::RollbackUndo undo = state.rollback.roll_back();
    state.restore(*state.rollback.good());
    state.quarantine(run_, step_index + 1, "rollback: " + verdict.reason(), undo.excluded_sample_ids);
    return {{"from_step", step_index + 1},
            {"to_step", undo.to_step},
            {"rollbacks", state.guard.rollbacks()},
            {"max_rollbacks", run_.config.guard.max_rollbacks},
            {"undone_steps", undo.undone_steps},
            {"excluded_sample_ids", undo.excluded_sample_ids}};
  }

  [[noreturn]] void halt(TrainableState& state, int64_t step_index, const train::GuardVerdict& verdict) {
    // Policy halt: the state is still that after the previous step. Rollbacks
    // used up: the last good snapshot is what gets saved.
    const RollbackSnapshot* good = state.rollback.good();
    if (good) state.restore(*good, /*count_as_rollback=*/false);
    // Every rank decides alike (the step's sums are global); rank 0 writes,
    // after any background write in progress, and nothing is written after it.
    fs::path dir = run_.checkpoints_dir / ("step-" + std::to_string(state.progress.completed_steps));
    if (run_.options.rank == 0) dir = checkpoints_.write_final(state.snapshot(run_));
    // A cliff halts when rollbacks are used up, or when there is no good
    // snapshot to go back to yet.
    const std::string why =
        verdict.kind != "cliff" ? ""
        : good ? " after " + std::to_string(state.guard.rollbacks()) + " rollback(s) (guard.max_rollbacks)"
               : " with no good snapshot to roll back to yet (the first is validated one step after step " +
                     std::to_string(run_.config.guard.snapshot_every) + ", guard.snapshot_every)";
    throw std::runtime_error("guard policy '" + run_.config.guard.policy + "': " + verdict.reason() + " at step " +
                             std::to_string(step_index + 1) + why + "; the state " +
                             (good ? "of the last good snapshot (step " + std::to_string(good->completed_steps) + ")"
                                   : std::string("before it")) +
                             " is saved in " + dir.string());
  }

  void warn_new_level(const StepStats& step, const StepDecision& d) const {
    const auto& verdict = d.verdict;
    const std::string released = d.evidence.contains("released_sample_ids")
                                     ? log::str("; the ", d.evidence["released_sample_ids"].size(),
                                                " sample(s) they quarantined are released")
                                     : "";
    log::warn("guard", log::str("step ", step.position.global_step + 1, ": ", verdict.metric, " ", verdict.value,
                                " above the spike threshold ", verdict.threshold, " for ", verdict.rebaselined,
                                " steps in a row: a new level, not a spike; applied, and those steps are ",
                                verdict.metric, "'s new baseline", released));
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
    rusage usage{};
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
      auto seconds = [](const timeval& v) { return static_cast<double>(v.tv_sec) + 1e-6 * static_cast<double>(v.tv_usec); };
      t.cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    }
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
};

}  // namespace

void register_optimizer_step(graph::NodeRegistry& registry) {
  for (const std::string optimizer : {"adamw", "muon"}) {
    graph::NodeSpec spec;
    spec.type = "optimizer_step." + optimizer;
    spec.description =
        optimizer == "adamw"
            ? "grad norm, guard (skip, quarantine, rollback), clipping, AdamW at the scheduled LR; one record per step; "
              "snapshots"
            : "as optimizer_step.adamw, with Muon on the 2-D hidden weights (params: lr, weight_decay, momentum, "
              "ns_steps) and AdamW on the rest";
    spec.check_params = [optimizer](config::YamlSection& params) { check_optimizer_params(optimizer, params); };
    spec.params = optimizer_params(optimizer);
    spec.inputs = {{"in", "StepStats"}};
    spec.outputs = {{"token", "ModelToken"},
                    {"record", "StepRecord"},
                    {"snapshot", "Snapshot", false, false, true},
                    {"eval", "Snapshot", false, false, true}};
    spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
      return std::make_unique<OptimizerStep>(environment(context), context.name);
    };
    add_node_kind(registry, std::move(spec), optimizer_hooks(optimizer));
  }
}

}  // namespace dflow::nodes
