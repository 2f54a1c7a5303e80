#include "nodes/trainer.hpp"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "graph/export.hpp"
#include "graph/pipeline.hpp"
#include "report/analysis.hpp"
#include "report/live_server.hpp"
#include "report/pipeline_model.hpp"
#include "report/summary_table.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "train/checkpoint_cleanup.hpp"

namespace dflow::nodes {

namespace {

// A fresh run never loses saved work by accident: an out_dir with
// checkpoints needs --resume or --overwrite (checked before anything loads,
// acted on only once everything has loaded).
void refuse_existing_checkpoints(const config::Config& config, const RunOptions& options) {
  const fs::path out_dir = config.run.out_dir;
  if (auto existing = train::list_checkpoints(out_dir / "checkpoints"); !existing.empty() && !options.overwrite)
    throw ConfigError(out_dir.string() + " already holds checkpoints (newest " +
                      existing.back().filename().string() +
                      "): continue it with --resume latest, start over with --overwrite (deletes them), "
                      "or choose another run.out_dir");
}

void start_fresh(const RunContext& run) {
  if (run.options.rank != 0) return;
  // What the checkpoints directory holds, not the directory: it may be a
  // mount point (its own volume), which cannot be removed.
  if (fs::is_directory(run.checkpoints_dir))
    for (const auto& entry : fs::directory_iterator(run.checkpoints_dir)) fs::remove_all(entry.path());
  fs::remove(run.quarantine_path);
}

// What the LR schedule spans, and why, said at start: so that a short run's
// decay (or a long one's) surprises no one.
std::string describe_schedule(const RunContext& run, const train::Schedule& schedule) {
  const std::string why =
      !run.resumed_from.empty()               ? "as the run started with"
      : schedule.total_steps < run.total_steps ? log::str("run.max_steps ends the run before train.epochs ", run.config.train.epochs,
                                                         " x ", run.steps_per_epoch, " steps per epoch")
                                               : log::str("train.epochs ", run.config.train.epochs, " x ", run.steps_per_epoch,
                                                         " steps per epoch");
  return log::str("schedule: ", schedule.kind, " over ", schedule.total_steps, " steps (warmup ", schedule.warmup_steps(),
                  "): ", why);
}

// The fault corrupt_init: this rank's drafter as a rank whose start differs
// from rank 0's (another build's eigendecomposition) would hold it.
void corrupt_init(TrainableState& state, double factor) {
  torch::NoGradGuard no_grad;
  for (auto& t : state.drafter_tensors())
    if (t.is_floating_point()) t.mul_(factor);
  log::warn("faults", log::str("injected fault corrupt_init: every drafter tensor, the fixed ones too, multiplied by ",
                               factor));
}

}  // namespace

TrainResult run_training(const config::Config& config, const RunOptions& options) {
  torch::set_num_threads(config.run.torch_threads);
  auto resume = open_resume_checkpoint(config, options);
  if (!resume) refuse_existing_checkpoints(config, options);
  const RunContext run(config, options, resume ? &*resume : nullptr);
  auto state = std::make_unique<TrainableState>(run, resume ? &*resume : nullptr);
  if (auto* f = run.fault("corrupt_init", "", run.start.completed_steps)) corrupt_init(*state, f->factor);
  log::info("train", describe_schedule(run, state->schedule));
  resume.reset();  // the checkpoint's tensors are in the state now
  if (run.resumed_from.empty()) start_fresh(run);
  else if (options.rank == 0) train::remove_stale_temporaries(run.checkpoints_dir);  // a killed writer's leftovers
  fs::create_directories(run.out_dir);
  RunJournal journal(run);
  std::optional<train::CheckpointState> untrained;
  if (run.resumed_from.empty() && run.wants_untrained_state) untrained = state->snapshot(run);
  if (options.dist) {
    // Each rank built its own graph; they must agree on what they compute.
    auto& dist = *options.dist;
    dist.require_same(std::hash<std::string>{}(run.config_yaml), "the resolved config");
    dist.require_same(run.plans().get(run.start.cursor.epoch)->data_fingerprint(), "the dataset (fingerprint)");
    dist.require_same(static_cast<uint64_t>(run.start.completed_steps), "the step resumed from");
    // What a kind derives from the target (DSpine's transfer_rank, its codes
    // by an eigendecomposition) may come out otherwise on other hardware or
    // library builds: the shapes must agree, then every rank takes rank 0's
    // tensors, the fixed ones too, as its checkpoints would give them.
    dist.require_same(
        std::hash<std::string>{}(drafter::drafter_config_json(run.drafter_spec, run.drafter_dtype).dump()),
        "the drafter's shape (its config.json, with what its kind chose from the target; set the "
        "drafter node's params to choose it)");
    dist.broadcast(state->drafter_tensors(), "broadcast of rank 0's drafter (parameters and fixed tensors)");
  }
  StateHome home(std::move(state));
  train::CheckpointWriter checkpoints(run.checkpoints_dir, config.checkpoint.keep);
  const RunEnvironment env{run, journal, home, checkpoints, untrained ? &*untrained : nullptr};

  graph::BuildOptions build;
  build.threads = config.run.threads;
  build.user_context = &env;
  // run.config's: without the nodes that are off in this run (RunContext).
  auto pipeline = graph::build_pipeline(run.config.pipeline, options.node_kinds(), build);
  // The declared graph beside the metrics: what `dflow report` draws.
  auto graph_json = graph::to_json(pipeline->description());
  if (options.rank == 0) std::ofstream(run.out_dir / "graph.json") << graph_json.dump(2) << "\n";
  if (options.live) options.live->set_graph(graph_json);
  log::info("train", log::str("run '", config.run.name, "': ", run.steps_per_epoch, " steps per epoch, ",
                              config.train.epochs, " epochs, ", run.total_steps, " steps in all; this invocation runs steps ",
                              run.start.completed_steps + 1, "..", run.stop_step, " on ", config.run.threads,
                              " graph threads",
                              options.dist ? log::str(" (rank ", options.rank, " of ", options.world_size, ")") : ""));
  try {
    if (run.start.completed_steps < run.stop_step) pipeline->run();
    if (options.dist) {
      options.dist->mark_done();
      options.dist->barrier("the end-of-run barrier");
    }
  } catch (const std::exception& e) {
    if (options.dist) options.dist->mark_failed(e.what());
    throw;
  }

  const RunSummary summary = journal.summary();
  TrainResult result;
  result.completed_steps = summary.completed_steps;
  result.total_steps = run.total_steps;
  result.last_record = summary.last_record;
  result.last_checkpoint = summary.last_checkpoint;
  result.metrics_path = (run.out_dir / "metrics.jsonl").string();
  const auto& sinks = config.metrics.sinks;
  if (std::find(sinks.begin(), sinks.end(), "tensorboard") != sinks.end())
    result.tensorboard_dir = (run.out_dir / "tensorboard").string();
  result.telemetry = graph::to_json(pipeline->telemetry());
  // The report's bottleneck analysis over the whole invocation, for the console.
  const nlohmann::json last = {{"kind", "step"}, {"global_step", result.completed_steps},
                               {"total_steps", result.total_steps}, {"telemetry", result.telemetry}};
  result.findings = report::analyze(report::pipeline_model(graph_json, &result.telemetry), {last}).summary;
  result.alarms = summary.alarms;
  result.checkpoint_failures = summary.checkpoint_failures;
  // on_write_error continue trains on past a failed checkpoint, but a run
  // whose last checkpoint is not saved has not kept its result: it fails.
  if (!summary.checkpoint_failures.empty() &&
      summary.checkpoint_failures.back().value("global_step", int64_t{0}) == summary.completed_steps)
    throw std::runtime_error("the run trained to step " + std::to_string(summary.completed_steps) +
                             " but its final " + summary.checkpoint_failures.back().value("message", std::string()));
  result.last_eval = summary.last_eval;
  result.best_eval = summary.best_eval;
  result.batching = run.batching.signature();
  result.real_tokens = summary.real_tokens;
  result.padded_tokens = summary.padded_tokens;
  return result;
}

std::string summarize(const TrainResult& r) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4);
  // Counted to where the run ends (its records' total_steps: run.max_steps when
  // that ends it sooner), as the console line and the report count it.
  const int64_t run_end = r.last_record.is_object() ? r.last_record.value("total_steps", r.total_steps) : r.total_steps;
  out << "trained " << r.completed_steps << "/" << run_end << " steps";
  if (run_end < r.total_steps) out << " (run.max_steps; train.epochs hold " << r.total_steps << ")";
  if (!r.last_record.empty()) {
    const auto& rec = r.last_record;
    out << "\n  final loss " << (rec["loss"].is_number() ? rec["loss"].get<double>() : NAN);
    out << "\n  accuracy per block position (k=1..):";
    for (const auto& a : rec["accuracy_per_position"]) out << " " << std::setprecision(3) << a.get<double>();
  }
  if (!r.last_eval.empty()) {
    out << std::setprecision(2) << "\n  acceptance length tau on held-out prompts: " << r.last_eval["mean_tau"].get<double>()
        << " at step " << r.last_eval["global_step"];
    if (!r.best_eval.empty())
      out << "; best " << r.best_eval["mean_tau"].get<double>() << " at step " << r.best_eval["global_step"]
          << " (checkpoints/best)";
  }
  if (r.padded_tokens > 0)
    out << std::setprecision(1) << "\n  batching " << r.batching << ": padding efficiency "
        << 100.0 * static_cast<double>(r.real_tokens) / static_cast<double>(r.padded_tokens) << "% (" << r.real_tokens
        << " real of " << r.padded_tokens << " padded tokens)";
  out << "\n  metrics: " << r.metrics_path;
  if (!r.tensorboard_dir.empty())
    out << "\n  tensorboard: " << r.tensorboard_dir << " (tensorboard --logdir "
        << fs::path(r.tensorboard_dir).parent_path().string() << ")";
  out << "\n  checkpoint: " << (r.last_checkpoint.empty() ? "(none written by this invocation)" : r.last_checkpoint);
  if (!r.telemetry.is_null()) out << "\n" << report::summary_table(r.telemetry);
  if (!r.findings.empty()) {
    out << "\nwhere the graph waited:";
    for (const auto& line : r.findings) out << "\n  - " << line;
  }
  for (const auto& failure : r.checkpoint_failures)
    out << "\n  ! " << failure.value("message", "");
  for (const auto& alarm : r.alarms) {
    if (alarm.value("alarm", "") == "metrics_not_written") {
      out << "\n  ! " << alarm.value("records", int64_t{0}) << " records not written to "
          << alarm.value("path", std::string()) << ", of steps " << alarm.value("first_step", int64_t{0}) << ".."
          << alarm.value("last_step", int64_t{0}) << " (";
      std::string kinds;
      const nlohmann::json by_kind = alarm.value("kinds", nlohmann::json::object());
      for (const auto& [kind, count] : by_kind.items())
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(count.get<int64_t>()) + " " + kind;
      out << kinds << "): " << alarm.value("message", std::string());
      continue;
    }
    out << "\n  ! drain alarm at step " << alarm.value("global_step", int64_t{0}) << ": " << alarm.value("message", "");
  }
  return out.str();
}

}  // namespace dflow::nodes
