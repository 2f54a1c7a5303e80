#include "nodes/run_journal.hpp"

#include <algorithm>
#include <filesystem>

#include "config/log.hpp"
#include "nodes/metrics_resume.hpp"
#include "report/live_server.hpp"

namespace dflow::nodes {

namespace {

int64_t step_of(const nlohmann::json& record) {
  const auto it = record.find("global_step");
  return it != record.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

nlohmann::json loss_json(const SinkLoss& loss) {
  return {{"kind", "alarm"}, {"alarm", "metrics_not_written"}, {"sink", loss.sink}, {"path", loss.path}, {"records", loss.records}, {"first_step", loss.first_step},
          {"last_step", loss.last_step}, {"kinds", loss.kinds}, {"message", loss.message}};
}

}  // namespace

RunJournal::RunJournal(const RunContext& run) : run_(run) {
  const auto& sinks = run.config.metrics.sinks;
  auto has_sink = [&](const char* sink) { return std::find(sinks.begin(), sinks.end(), sink) != sinks.end(); };
  jsonl_ = has_sink("jsonl");
  summary_.completed_steps = run.start.completed_steps;
  if (run.options.rank != 0) return;
  // A resumed run never writes the steps up to its checkpoint again (report/tensorboard_sink.hpp).
  if (has_sink("tensorboard")) {
    tensorboard_ = std::make_unique<report::TensorBoardSink>(report::TensorBoardOptions{
        .dir = run.out_dir / "tensorboard", .resume_step = run.resumed_from.empty() ? -1 : run.start.completed_steps});
    tensorboard_loss_.sink = "tensorboard";
    tensorboard_loss_.path = tensorboard_->file().string();
  }
  const auto path = run.out_dir / "metrics.jsonl";
  if (!run.resumed_from.empty()) trim_metrics_to_checkpoint(path, run.resumed_from, run.start.completed_steps, jsonl_);
  metrics_jsonl_ = std::make_unique<report::AppendFile>(
      path, run.resumed_from.empty() ? report::AppendFile::Mode::truncate : report::AppendFile::Mode::append);
  jsonl_loss_.sink = "jsonl";
  jsonl_loss_.path = path.string();
}

RunJournal::~RunJournal() = default;

template <class Write>
void RunJournal::write_to(SinkLoss& loss, const nlohmann::json& record, Write&& write,
                          std::vector<nlohmann::json>& alarms) {
  const int64_t step = step_of(record);
  try {
    write();
    if (loss.failing)
      log::info("metrics", log::str(loss.path, " is written again from step ", step, " (", loss.records,
                                    " record(s) missing so far, listed at the end of the run)"));
    loss.failing = false;
  } catch (const std::exception& e) {
    if (!loss.failing) {
      const std::string message = std::string(e.what()) + "; training goes on, and this sink tries again with every record";
      alarms.push_back({{"kind", "alarm"}, {"alarm", "metrics_not_written"}, {"sink", loss.sink}, {"path", loss.path},
                        {"global_step", std::max<int64_t>(step, 0)}, {"message", message}});
      if (loss.message.empty()) loss.message = e.what();
    }
    loss.failing = true;
    ++loss.records;
    ++loss.kinds[record.value("kind", "record")];
    if (step >= 0) {
      loss.first_step = loss.first_step < 0 ? step : std::min(loss.first_step, step);
      loss.last_step = std::max(loss.last_step, step);
    }
  }
}

std::vector<nlohmann::json> RunJournal::write_to_sinks(const nlohmann::json& record) {
  std::vector<nlohmann::json> alarms;
  if (jsonl_ && metrics_jsonl_)
    write_to(jsonl_loss_, record, [&] { metrics_jsonl_->append(record.dump() + "\n"); }, alarms);
  if (tensorboard_) write_to(tensorboard_loss_, record, [&] { tensorboard_->write(record); }, alarms);
  return alarms;
}

void RunJournal::write(const nlohmann::json& record) {
  std::vector<nlohmann::json> alarms;
  {
    std::lock_guard lock(write_mutex_);
    alarms = write_to_sinks(record);
    // An alarm goes to the sinks that still write; a sink that fails on it
    // raises its own alarm once (each sink alarms once per outage).
    for (size_t i = 0; i < alarms.size(); ++i)
      for (auto& more : write_to_sinks(alarms[i])) alarms.push_back(std::move(more));
  }
  publish_live(record);
  for (const auto& alarm : alarms) {
    log::warn("metrics", log::str("the record of step ", alarm.value("global_step", int64_t{0}), " was not written: ",
                                  alarm.value("message", "")));
    publish_live(alarm);
  }
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
  RunSummary summary;
  {
    std::lock_guard lock(summary_mutex_);
    summary = summary_;
  }
  std::lock_guard lock(write_mutex_);
  for (const SinkLoss* loss : {&jsonl_loss_, &tensorboard_loss_})
    if (loss->records > 0) summary.alarms.push_back(loss_json(*loss));
  return summary;
}

}  // namespace dflow::nodes
