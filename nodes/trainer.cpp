#include "nodes/trainer.hpp"

#include <iomanip>
#include <sstream>

#include "config/log.hpp"
#include "graph/export.hpp"
#include "graph/pipeline.hpp"
#include "report/analysis.hpp"
#include "report/live_server.hpp"
#include "report/pipeline_model.hpp"
#include "report/summary_table.hpp"
#include "nodes/eval_tau.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

TrainResult run_training(const config::Config& config, const RunOptions& options) {
  torch::set_num_threads(config.run.torch_threads);
  RunState state(config, options);
  for (const auto& node : config.pipeline.nodes)
    if (node.type == "eval.tau") state.eval_prompts = held_out_prompts(state, node.name);
  graph::BuildOptions build;
  build.threads = config.run.threads;
  build.user_context = &state;
  auto pipeline = graph::build_pipeline(config.pipeline, default_registry(), build);
  state.telemetry = &pipeline->telemetry_board();
  // The declared graph beside the metrics: what `dflow report` draws.
  auto graph_json = graph::to_json(pipeline->description());
  if (options.rank == 0) std::ofstream(state.out_dir / "graph.json") << graph_json.dump(2) << "\n";
  if (options.live) options.live->set_graph(graph_json);
  log::info("train", log::str("run '", config.run.name, "': ", state.steps_per_epoch, " steps per epoch, ",
                              config.train.epochs, " epochs, ", state.total_steps, " steps in all; this invocation runs steps ",
                              state.completed_steps + 1, "..", state.stop_step, " on ", config.run.threads,
                              " graph threads",
                              options.dist ? log::str(" (rank ", options.rank, " of ", options.world_size, ")") : ""));
  if (options.dist) {
    // Each rank built its own graph; they must agree on what they compute.
    auto& dist = *options.dist;
    dist.require_same(std::hash<std::string>{}(state.config_yaml), "the resolved config");
    dist.require_same(state.plan(state.cursor.epoch).data_fingerprint(), "the dataset (fingerprint)");
    dist.require_same(static_cast<uint64_t>(state.completed_steps), "the step resumed from");
    std::vector<torch::Tensor> parameters;
    for (const auto& [name, t] : state.drafter_parameters()) parameters.push_back(t);
    dist.broadcast(parameters, "broadcast of rank 0's parameters");
  }
  try {
    if (state.completed_steps < state.stop_step) pipeline->run();
    if (options.dist) {
      options.dist->mark_done();
      options.dist->barrier("the end-of-run barrier");
    }
  } catch (const std::exception& e) {
    if (options.dist) options.dist->mark_failed(e.what());
    throw;
  }

  TrainResult result;
  result.completed_steps = state.completed_steps;
  result.total_steps = state.total_steps;
  result.last_record = state.last_record;
  result.last_checkpoint = state.last_checkpoint;
  result.metrics_path = (state.out_dir / "metrics.jsonl").string();
  result.telemetry = graph::to_json(pipeline->telemetry());
  // The report's bottleneck analysis over the whole invocation, for the console.
  const nlohmann::json last = {{"kind", "step"}, {"global_step", result.completed_steps},
                               {"total_steps", result.total_steps}, {"telemetry", result.telemetry}};
  result.findings = report::analyze(report::pipeline_model(graph_json, &result.telemetry), {last}).summary;
  {
    std::lock_guard lock(state.summary_mutex);
    result.alarms = state.alarms;
  }
  result.last_eval = state.last_eval;
  result.best_eval = state.best_eval;
  return result;
}

std::string summarize(const TrainResult& r) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4);
  out << "trained " << r.completed_steps << "/" << r.total_steps << " steps";
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
  out << "\n  metrics: " << r.metrics_path;
  out << "\n  checkpoint: " << (r.last_checkpoint.empty() ? "(none written by this invocation)" : r.last_checkpoint);
  if (!r.telemetry.is_null()) out << "\n" << report::summary_table(r.telemetry);
  if (!r.findings.empty()) {
    out << "\nwhere the graph waited:";
    for (const auto& line : r.findings) out << "\n  - " << line;
  }
  for (const auto& alarm : r.alarms)
    out << "\n  ! drain alarm at step " << alarm.value("global_step", int64_t{0}) << ": " << alarm.value("message", "");
  return out.str();
}

}  // namespace dflow::nodes
