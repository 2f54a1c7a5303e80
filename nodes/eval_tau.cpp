// eval.tau: does the drafter draft, while it trains? Takes the snapshots
// optimizer_step emits every eval.every_steps steps (and after the last),
// runs speculative decoding with that snapshot on held-out prompts, and
// writes an `eval` record (mean tau, its histogram, acceptance by position)
// to the metrics plus a console line. The snapshot with the best tau so far
// is written as checkpoints/best. A fresh run first evaluates the untrained
// drafter (global_step 0, at its first firing): the baseline every later tau
// is read against.
//
// It works on its own copy of the weights, off the model token, so training
// continues meanwhile; it competes only for compute. Its input edge bounds
// how far it may fall behind.
#include <algorithm>
#include <chrono>
#include <optional>
#include <iomanip>
#include <sstream>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "nodes/eval_tau.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "train/evaluate.hpp"

namespace dflow::nodes {

namespace {

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

class EvalTau final : public graph::FunctionBody {
 public:
  EvalTau(const RunEnvironment& env, std::string name)
      : run_(env.run),
        journal_(env.journal),
        checkpoints_(env.checkpoints),
        name_(std::move(name)),
        settings_(env.run.prepared_for<PreparedEval>(name_).settings),
        prompts_(env.run.prepared_for<PreparedEval>(name_).prompts) {
    // Only rank 0 evaluates: no other rank holds a copy. It drafts in the
    // dtype the drafter trains and exports in (the memory fit counts it so).
    if (run_.options.rank == 0) {
      drafter_ = drafter::DFlashDrafter(run_.drafter_spec, 0);
      drafter_->to(run_.drafter_device, run_.drafter_dtype);
      drafter_->eval();
      for (auto& p : drafter_->parameters()) p.set_requires_grad(false);
    }
    options_.max_new_tokens = settings_.max_new_tokens;
    options_.temperature = settings_.temperature;
    options_.seed = settings_.seed;
    options_.compare_with_target = false;  // tau only: half the cost
    // A resumed run keeps the best tau it had; a fresh one first measures
    // the untrained drafter (its weights taken now, before any step).
    if (!run_.resumed_from.empty()) {
      if (auto best = train::best_checkpoint_eval(run_.checkpoints_dir)) best_tau_ = best->value("mean_tau", best_tau_);
    } else if (run_.options.rank == 0) {
      if (!env.untrained) throw std::logic_error("eval.tau: the untrained drafter's snapshot was not taken before the graph was built");
      baseline_ = *env.untrained;
    }
  }

  void process(graph::Inputs& in, graph::Emitter&) override {
    if (run_.options.rank != 0) return;
    if (baseline_) {
      evaluate(*baseline_, run_.started_at);
      baseline_.reset();
    }
    const auto& snapshot = in.get<Snapshot>(0);
    evaluate(snapshot.state, snapshot.taken_at);
  }

 private:
  // `taken_at`: when the snapshot was taken; the record says how long it
  // waited for a thread (the report shows it).
  void evaluate(const train::CheckpointState& snapshot, std::chrono::steady_clock::time_point taken_at) {
    load(snapshot.drafter_tensors);
    const auto started = std::chrono::steady_clock::now();
    const double waited = std::chrono::duration<double>(started - taken_at).count();
    const train::EvalReport report = train::evaluate_drafter(*drafter_, *run_.targets.front(), prompts_, options_);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const bool improved = report.mean_tau > best_tau_;
    nlohmann::json eval = {{"global_step", snapshot.global_step},
                           {"mean_tau", report.mean_tau},
                           {"prompts", report.prompts},
                           {"max_new_tokens", options_.max_new_tokens},
                           {"temperature", options_.temperature},
                           {"prompts_file", settings_.prompts}};
    std::string best_note;
    if (improved) {
      // A best checkpoint that cannot be written follows checkpoint.on_write_error.
      try {
        if (auto dir = checkpoints_.write_best(snapshot, eval)) {
          best_tau_ = report.mean_tau;
          best_note = ", best so far: " + dir->string();
        } else {
          best_note = ", best so far but not saved: the run is halting";
        }
      } catch (const std::exception& e) {
        if (run_.config.checkpoint.on_write_error != "continue")
          throw std::runtime_error(std::string(e.what()) + " (checkpoint.on_write_error: halt)");
        best_note = ", best so far but not saved: " + std::string(e.what());
        log::warn("eval", std::string(e.what()) + "; training goes on (checkpoint.on_write_error: continue)");
        journal_.write({{"kind", "alarm"}, {"alarm", "checkpoint_not_saved"}, {"global_step", snapshot.global_step},
                        {"checkpoint", "best"}, {"message", e.what()}});
      }
    }
    nlohmann::json record = eval;
    record["kind"] = "eval";
    record["node"] = name_;
    record["tau_histogram"] = report.tau_histogram;
    record["acceptance_by_position"] = report.acceptance_by_position;
    record["cycles"] = report.cycles;
    record["generated_tokens"] = report.generated_tokens;
    if (!report.confidence_calibration.empty()) record["confidence_calibration"] = report.calibration_json();
    record["best"] = improved;
    record["best_tau"] = best_tau_;
    record["time"] = {
        {"eval_s", seconds}, {"waited_s", waited}, {"speculative_tokens_per_s", report.speculative_tokens_per_s}};
    journal_.write(record);
    log::info("eval", log::str("step ", snapshot.global_step, ": tau ", fixed(report.mean_tau, 2), " on ",
                               report.prompts, " held-out prompts (", fixed(seconds, 1), " s",
                               waited >= 1.0 ? ", after waiting " + fixed(waited, 1) + " s for a thread" : "", ")",
                               best_note));
    journal_.eval_done(record, improved);
  }

  void load(const train::NamedTensors& tensors) {
    torch::NoGradGuard no_grad;
    std::map<std::string, const torch::Tensor*> by_name;
    for (const auto& [name, tensor] : tensors) by_name[name] = &tensor;
    for (auto& item : drafter_->named_parameters(true)) {
      auto it = by_name.find(item.key());
      if (it == by_name.end()) throw std::runtime_error("eval: the snapshot lacks drafter tensor " + item.key());
      item.value().copy_(*it->second);
    }
  }

  const RunContext& run_;
  RunJournal& journal_;
  train::CheckpointWriter& checkpoints_;
  std::string name_;
  EvalSettings settings_;
  std::vector<std::vector<int64_t>> prompts_;
  drafter::DFlashDrafter drafter_{nullptr};
  train::EvalOptions options_;
  std::optional<train::CheckpointState> baseline_;  // a fresh run's untrained weights
  double best_tau_ = -1.0;
};

// Why the node is off in this run ("" when it runs): RunHooks::off_because.
std::string eval_off_because(const config::Config& config, const config::NodeDecl& node) {
  if (config.eval.every_steps > 0) return "";
  auto params = node_params(config.pipeline, node);
  const std::string prompts = read_eval_settings(config.eval, params).prompts;
  if (prompts.empty())
    return "no held-out prompts (neither its params.prompts nor eval.prompts is set) and eval.every_steps is 0: "
           "tau is not measured in this run";
  if (fs::exists(prompts)) return "";
  const std::string where =
      fs::path(prompts).is_relative() ? " (relative to " + fs::current_path().string() + ")" : "";
  return "its held-out prompts file '" + prompts + "' does not exist" + where +
         " and eval.every_steps is 0: tau is not measured in this run (with eval.every_steps > 0 a missing prompts "
         "file is refused)";
}

}  // namespace

void register_eval_tau(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "eval.tau";
  spec.description = "every eval.every_steps: tau by speculative decoding of held-out prompts (params: prompts, "
                     "max_prompts, max_new_tokens, temperature, seed; defaults from eval:); checkpoints/best";
  spec.inputs = {{"in", "Snapshot"}};
  // Off the training loop, which keeps every graph thread busy: without
  // priority an evaluation (the untrained baseline first) could wait for a
  // thread until training ended. It takes one thread while it runs.
  spec.high_priority = true;
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<EvalTau>(environment(context), context.name);
  };
  RunHooks hooks;
  spec.check_params = [](config::YamlSection& params) { read_eval_settings(config::EvalConfig{}, params); };
  spec.params = eval_params();
  hooks.prepare = [](const RunContext& run, const config::NodeDecl& node) -> std::any {
    auto params = node_params(run.config.pipeline, node);
    PreparedEval prepared{read_eval_settings(run.config.eval, params), {}};
    prepared.prompts = held_out_prompts(run, node.name, prepared.settings);
    return prepared;
  };
  // With eval.every_steps 0 (no periodic evaluation asked for) the node is
  // off without prompts, and with a prompts file that is not there: a config
  // carrying the demo's relative runs/demo/heldout.jsonl trains from any
  // directory. With every_steps > 0 both are refused (the config, prepare).
  hooks.off_because = eval_off_because;
  // An evaluation that runs decodes with the whole target; an off one is left out before anything loads.
  hooks.needs_target = [](const config::Config& config, const config::NodeDecl& node) -> std::string {
    return eval_off_because(config, node).empty() ? "decodes held-out prompts with the target in-process" : "";
  };
  hooks.wants_untrained_state = true;  // the baseline every later tau is read against
  hooks.holds_drafter_copy = true;     // rank 0's, in the drafter's dtype
  // Tau means the same on the same prompts, budget and temperature, against the same target.
  hooks.tau_terms = [](const config::Config& config, config::YamlSection& params) {
    const EvalSettings s = read_eval_settings(config.eval, params);
    std::ostringstream temperature;
    temperature << s.temperature;
    return std::map<std::string, std::string>{{"params.prompts", s.prompts},
                                              {"params.max_prompts", std::to_string(s.max_prompts)},
                                              {"params.max_new_tokens", std::to_string(s.max_new_tokens)},
                                              {"params.temperature", temperature.str()},
                                              {"model.target.path", config.model.target.path}};
  };
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
