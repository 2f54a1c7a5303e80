// metric_sample: writes each step's record, plus a graph telemetry snapshot
// taken when the record arrives, to the configured sinks. A slow sink only
// backs up this node's input edge; it never changes what a record contains.
#include <iomanip>
#include <iostream>

#include "config/log.hpp"
#include "graph/telemetry.hpp"
#include "report/drain_detector.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

std::string format_duration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

class MetricSample final : public graph::FunctionBody {
 public:
  MetricSample(const RunContext& run, RunJournal& journal, const graph::TelemetryBoard* telemetry)
      : run_(run), journal_(journal), telemetry_(telemetry),
        drain_({.window_steps = run.config.metrics.drain_window_steps,
                .horizon_steps = run.config.metrics.drain_horizon_steps}) {
    for (const auto& sink : run.config.metrics.sinks) console_ = console_ || sink == "console";
    console_ = console_ && run.options.rank == 0;  // records are global: one console is enough
  }

  void process(graph::Inputs& in, graph::Emitter&) override {
    auto& record = in.get<StepRecord>(0);
    if (telemetry_) record.telemetry = graph::to_json(telemetry_->snapshot());
    const nlohmann::json json = record.to_json();
    journal_.write(json);
    if (record.guard.action != "applied") journal_.write(record.guard_event_json());
    // Once the source has emitted its last batch the edges empty by design;
    // that is the end of the data, not a draining queue.
    if (telemetry_ && !journal_.source_exhausted) {
      for (const auto& alarm : drain_.observe(record.global_step, record.telemetry)) {
        log::warn("graph", alarm.message);
        journal_.write(alarm.to_record());
        journal_.alarm_raised(alarm.to_record());
      }
    }
    if (console_ && (record.global_step % run_.config.metrics.console_every == 0 || record.global_step == run_.stop_step))
      console_line(record);
    journal_.record_written(json);
  }

 private:
  void console_line(const StepRecord& r) {
    std::ostringstream line;
    line << std::fixed << "epoch " << r.epoch + 1 << "/" << run_.config.train.epochs << " step " << r.step_in_epoch
         << "/" << r.steps_per_epoch << " | global " << r.global_step << "/" << r.total_steps << " ("
         << std::setprecision(1) << 100.0 * r.run_progress() << "%)"
         << " | loss " << std::setprecision(4) << r.loss << " acc@1 " << std::setprecision(3)
         << (r.accuracy_per_position.empty() ? 0.0 : r.accuracy_per_position[0]) << " | lr " << std::scientific
         << std::setprecision(2) << r.lr << std::fixed << " | " << std::setprecision(0) << r.time.tokens_per_s
         << " tok/s | ETA " << format_duration(r.time.eta_s);
    log::info("train", line.str());
  }

  const RunContext& run_;
  RunJournal& journal_;
  const graph::TelemetryBoard* telemetry_;
  report::DrainDetector drain_;
  bool console_ = false;
};

}  // namespace

void register_metric_sample(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "metric_sample";
  spec.description = "per-step records plus graph telemetry to the sinks (metrics.jsonl, console, tensorboard)";
  spec.inputs = {{"in", "StepRecord"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<MetricSample>(env.run, env.journal, context.telemetry);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
