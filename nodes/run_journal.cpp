#include "nodes/run_journal.hpp"

#include <algorithm>
#include <filesystem>

#include "config/log.hpp"
#include "nodes/metrics_resume.hpp"
#include "report/live_server.hpp"

namespace dflow::nodes {

RunJournal::RunJournal(const RunContext& run) : run_(run) {
  const auto& sinks = run.config.metrics.sinks;
  auto has_sink = [&](const char* sink) { return std::find(sinks.begin(), sinks.end(), sink) != sinks.end(); };
  jsonl_ = has_sink("jsonl");
  summary_.completed_steps = run.start.completed_steps;
  if (run.options.rank != 0) return;
  // A resumed run never writes the steps up to its checkpoint again (report/tensorboard_sink.hpp).
  if (has_sink("tensorboard"))
    tensorboard_ = std::make_unique<report::TensorBoardSink>(report::TensorBoardOptions{
        .dir = run.out_dir / "tensorboard", .resume_step = run.resumed_from.empty() ? -1 : run.start.completed_steps});
  const auto path = run.out_dir / "metrics.jsonl";
  if (!run.resumed_from.empty()) trim_metrics_to_checkpoint(path, run.resumed_from, run.start.completed_steps, jsonl_);
  metrics_jsonl_.open(path, std::ios::out | (run.resumed_from.empty() ? std::ios::trunc : std::ios::app));
  if (!metrics_jsonl_) throw std::runtime_error("cannot write " + path.string());
}

void RunJournal::write(const nlohmann::json& record) {
  {
    std::lock_guard lock(write_mutex_);
    if (jsonl_ && metrics_jsonl_.is_open()) metrics_jsonl_ << record.dump() << "\n" << std::flush;
    if (tensorboard_) tensorboard_->write(record);
  }
  publish_live(record);
}

void RunJournal::publish_live(const nlohmann::json& record) {
  if (run_.options.live) run_.options.live->publish(record);
}

void RunJournal::step_completed(int64_t global_step) {
  std::lock_guard lock(summary_mutex_);
  summary_.completed_steps = std::max(summary_.completed_steps, global_step);
}

void RunJournal::record_written(nlohmann::json record) {
  std::lock_guard lock(summary_mutex_);
  if (record.value("kind", "") == "step") {
    summary_.real_tokens += record.value("real_tokens", int64_t{0});
    summary_.padded_tokens += record.value("padded_tokens", int64_t{0});
  }
  summary_.last_record = std::move(record);
}

void RunJournal::eval_done(nlohmann::json record, bool best) {
  std::lock_guard lock(summary_mutex_);
  if (best) summary_.best_eval = record;
  summary_.last_eval = std::move(record);
}

void RunJournal::checkpoint_written(const std::string& dir) {
  std::lock_guard lock(summary_mutex_);
  summary_.last_checkpoint = dir;
  ++summary_.checkpoints_written;
}

void RunJournal::alarm_raised(nlohmann::json alarm) {
  std::lock_guard lock(summary_mutex_);
  summary_.alarms.push_back(std::move(alarm));
}

void RunJournal::checkpoint_failed(int64_t global_step, const std::string& message) {
  std::lock_guard lock(summary_mutex_);
  summary_.checkpoint_failures.push_back({{"global_step", global_step}, {"message", message}});
}

RunSummary RunJournal::summary() const {
  std::lock_guard lock(summary_mutex_);
  return summary_;
}

}  // namespace dflow::nodes
