#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "config/log.hpp"
#include "report/run_data.hpp"

namespace dflow::report {

namespace fs = std::filesystem;

double number_or_nan(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s == "inf" || s == "+inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

const nlohmann::json* RunData::last_telemetry() const {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (it->contains("telemetry") && (*it)["telemetry"].is_object()) return &(*it)["telemetry"];
  return nullptr;
}

namespace {

int64_t step_of(const nlohmann::json& record) {
  auto it = record.find("global_step");
  return it != record.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

void add_checkpoint_step(RunData& run, int64_t step) {
  auto at = std::lower_bound(run.checkpoint_steps.begin(), run.checkpoint_steps.end(), step);
  if (at == run.checkpoint_steps.end() || *at != step) run.checkpoint_steps.insert(at, step);
}

void scan_checkpoint_dirs(RunData& run) {
  std::error_code error;
  fs::directory_iterator it(run.run_dir / "checkpoints", error);
  if (error) return;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    int64_t step = 0;
    auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
    if (ec == std::errc() && end == name.data() + name.size()) add_checkpoint_step(run, step);
  }
}

// Thins telemetry as records arrive (see LoadOptions).
class TelemetryThinner {
 public:
  explicit TelemetryThinner(const LoadOptions& options) : options_(options) {}

  void after_add(RunData& run) {
    const size_t tail = std::max<size_t>(options_.telemetry_tail, 1);
    if (run.steps.size() <= tail) return;
    nlohmann::json& leaving = run.steps[run.steps.size() - 1 - tail];  // just left the tail
    if (!keeps(leaving)) leaving.erase("telemetry");
    else if (leaving.contains("telemetry") && ++kept_ > std::max<size_t>(options_.telemetry_points, 2)) {
      stride_ *= 2;
      kept_ = 0;
      for (size_t i = 0; i + tail < run.steps.size(); ++i) {
        if (!keeps(run.steps[i])) run.steps[i].erase("telemetry");
        else kept_ += run.steps[i].contains("telemetry");
      }
    }
  }

 private:
  bool keeps(const nlohmann::json& step) const { return step_of(step) % stride_ == 0; }
  LoadOptions options_;
  int64_t stride_ = 1;
  size_t kept_ = 0;
};

}  // namespace

void add_record(RunData& run, nlohmann::json record) {
  if (!record.is_object()) throw std::runtime_error("a metrics record must be a JSON object");
  const std::string kind = record.value("kind", "");
  const int64_t step = step_of(record);
  if (kind != "step") {
    if (kind == "checkpoint" && step >= 0) add_checkpoint_step(run, step);
    run.events.push_back(std::move(record));
    return;
  }
  if (!run.steps.empty() && step >= 0 && step <= step_of(run.steps.back())) {
    // Resumed from a checkpoint: the new records replace the ones after it.
    auto first = std::find_if(run.steps.begin(), run.steps.end(), [&](const auto& r) { return step_of(r) >= step; });
    const auto dropped = run.steps.end() - first;
    run.steps.erase(first, run.steps.end());
    run.warnings.push_back(log::str("resumed at step ", step, ": ", dropped, " earlier step records replaced"));
  }
  run.steps.push_back(std::move(record));
}

RunData load_run(const fs::path& run_dir, const LoadOptions& options) {
  RunData run;
  run.run_dir = run_dir;
  const fs::path metrics = run_dir / "metrics.jsonl";
  std::ifstream in(metrics);
  if (!in) throw std::runtime_error(metrics.string() + ": cannot open (is " + run_dir.string() + " a dflow run directory?)");

  TelemetryThinner thinner(options);
  auto blank = [](const std::string& text) { return text.find_first_not_of(" \t\r") == std::string::npos; };
  auto where = [&](size_t number) { return log::str(metrics.string(), ":", number); };
  size_t number = 0, bad_line = 0;  // a bad line is an error unless nothing but blank lines follows it
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (blank(line)) continue;
    if (bad_line) throw std::runtime_error(where(bad_line) + ": not a JSON record; only the last line may be cut short");
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) {
      bad_line = number;
      continue;
    }
    try {
      const bool step = record.is_object() && record.value("kind", "") == "step";
      add_record(run, std::move(record));
      if (step) thinner.after_add(run);
    } catch (const std::exception& e) {
      throw std::runtime_error(where(number) + ": " + e.what());
    }
  }
  if (bad_line) {  // a killed run can leave half a line; everything before it is good
    run.warnings.push_back(where(bad_line) + ": truncated last line skipped");
    log::warn("report", run.warnings.back());
  }
  scan_checkpoint_dirs(run);

  const fs::path graph = run_dir / "graph.json";
  if (std::ifstream graph_in(graph); graph_in) {
    run.graph = nlohmann::json::parse(graph_in, nullptr, /*allow_exceptions=*/false);
    if (run.graph.is_discarded() || !run.graph.is_object()) {
      run.warnings.push_back(graph.string() + ": not valid JSON; drawing the graph from telemetry names");
      log::warn("report", run.warnings.back());
      run.graph = nullptr;
    }
  }
  return run;
}

}  // namespace dflow::report
