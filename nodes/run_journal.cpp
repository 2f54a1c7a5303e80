#include "nodes/run_journal.hpp"

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "config/log.hpp"

#include "report/live_server.hpp"

namespace dflow::nodes {

namespace {

// A run killed while writing a record can leave half a line at the end of
// metrics.jsonl; a resumed run appending to it would glue its first record to
// that half and make a line no reader can parse. The half line goes (its
// step is recomputed after the checkpoint anyway).
void drop_partial_last_line(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty() || text.back() == '\n') return;
  const size_t keep = text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1;
  fs::resize_file(path, keep, ec);
  if (ec) throw std::runtime_error("cannot repair the partial last line of " + path.string() + ": " + ec.message());
  log::warn("train", log::str("metrics.jsonl ended in a partial record (", text.size() - keep,
                              " bytes, a run killed while writing it); removed before appending"));
}

// The record of the checkpoint's step, which the checkpoint carries (its
// state.json): appended when metrics.jsonl lacks it (the run was killed after
// writing the checkpoint but before writing that record).
void restore_checkpoint_record(const fs::path& metrics, const fs::path& checkpoint) {
  std::ifstream state_in(checkpoint / "state.json");
  const auto state = nlohmann::json::parse(state_in, nullptr, false);
  if (state.is_discarded() || !state.contains("step_record")) return;
  const auto& saved = state["step_record"];
  const int64_t step = saved.value("global_step", int64_t{-1});
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"step\"") == std::string::npos) continue;
    const auto r = nlohmann::json::parse(line, nullptr, false);
    if (!r.is_discarded() && r.value("global_step", int64_t{-1}) == step) return;
  }
  in.close();
  std::ofstream out(metrics, std::ios::app);
  out << saved.dump() << "\n";
  if (!out.flush()) throw std::runtime_error("cannot write " + metrics.string());
  log::warn("train", log::str("metrics.jsonl lacked the record of step ", step,
                              " (the run ended between saving that checkpoint and writing it); restored from ", checkpoint.string()));
}

}  // namespace

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
  if (!run.resumed_from.empty()) {
    drop_partial_last_line(path);
    if (jsonl_) restore_checkpoint_record(path, run.resumed_from);
  }
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
