// metric_sample: writes each step's record, plus a graph telemetry snapshot
// taken when the record arrives, to the configured sinks. A slow sink only
// backs up this node's input edge; it never changes what a record contains.
#include <iomanip>
#include <iostream>

#include "config/log.hpp"
#include "graph/telemetry.hpp"
#include "report/live_server.hpp"
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
  MetricSample(RunState& state, const graph::TelemetryBoard* telemetry) : state_(state), telemetry_(telemetry) {
    for (const auto& sink : state.config.metrics.sinks) console_ = console_ || sink == "console";
    console_ = console_ && state.options.rank == 0;  // records are global: one console is enough
  }

  void process(graph::Inputs& in, graph::Emitter&) override {
    auto& record = in.get<StepRecord>(0).record;
    if (telemetry_) record["telemetry"] = graph::to_json(telemetry_->snapshot());
    const int64_t step = record["global_step"].get<int64_t>();
    write(record);
    if (record["guard"]["action"] != "applied") {
      nlohmann::json event = record["guard"];
      event["kind"] = "guard";
      event["event"] = record["guard"]["kind"];
      event["global_step"] = step;
      event["epoch"] = record["epoch"];
      write(event);
    }
    // Once the source has emitted its last batch the edges empty by design;
    // that is the end of the data, not a draining queue.
    if (telemetry_ && !state_.source_exhausted) {
      for (const auto& alarm : state_.drain.observe(step, record["telemetry"])) {
        log::warn("graph", alarm.message);
        write(alarm.to_record());
        std::lock_guard lock(state_.summary_mutex);
        state_.alarms.push_back(alarm.to_record());
      }
    }
    if (console_ && (step % state_.config.metrics.console_every == 0 || step == state_.stop_step)) console_line(record);
    std::lock_guard lock(state_.summary_mutex);
    state_.last_record = record;
  }

 private:
  void write(const nlohmann::json& record) { state_.write_metrics(record); }

  void console_line(const nlohmann::json& r) {
    const auto& acc = r["accuracy_per_position"];
    std::ostringstream line;
    line << std::fixed << "epoch " << r["epoch"].get<int>() + 1 << "/" << state_.config.train.epochs << " step "
         << r["step_in_epoch"] << "/" << r["steps_per_epoch"] << " | global " << r["global_step"] << "/"
         << r["total_steps"] << " (" << std::setprecision(1) << 100.0 * r["run_progress"].get<double>() << "%)"
         << " | loss " << std::setprecision(4) << (r["loss"].is_number() ? r["loss"].get<double>() : NAN)
         << " acc@1 " << std::setprecision(3) << (acc.empty() ? 0.0 : acc[0].get<double>()) << " | lr "
         << std::scientific << std::setprecision(2) << r["lr"].get<double>() << std::fixed << " | "
         << std::setprecision(0) << r["time"]["tokens_per_s"].get<double>() << " tok/s | ETA "
         << format_duration(r["time"]["eta_s"].get<double>());
    log::info("train", line.str());
  }

  RunState& state_;
  const graph::TelemetryBoard* telemetry_;
  bool console_ = false;
};

}  // namespace

void register_metric_sample(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "metric_sample";
  spec.description = "per-step records plus graph telemetry to the sinks (metrics.jsonl, console, tensorboard)";
  spec.inputs = {{"in", "StepRecord"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<MetricSample>(run_state(context), context.telemetry);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
