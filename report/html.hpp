#pragma once
// The run report: ONE self-contained HTML file (inline CSS, script and SVG;
// no network) that opens from disk. It shows the declared pipeline annotated
// with its telemetry, the findings in words, the training curves, every
// edge's occupancy and blocked time, with checkpoints, guard decisions and
// alarms marked on every plot over steps. The live server serves the same
// page with `live` set: it then re-fetches its data and redraws.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "report/analysis.hpp"
#include "report/pipeline_model.hpp"
#include "report/run_data.hpp"

namespace dflow::report {

// "2026-12-01 14:08:12", local time: when a page was generated.
std::string local_time_text();

struct ReportOptions {
  std::string title{};       // "" = the run directory's name
  size_t max_points = 2000;  // step records embedded, evenly thinned (guard decisions always kept)
  AnalysisOptions analysis{};
  bool live = false;         // the page polls records.json and summary.json (LiveServer sets it)
  int refresh_ms = 2000;
};

// Everything the page draws; render_html and the live server both build one.
struct Page {
  std::string title, run_dir;
  PipelineModel pipeline;
  nlohmann::json analysis;        // Analysis::to_json()
  std::string table;              // summary_table of the newest telemetry
  nlohmann::json records = nlohmann::json::array();  // RecordSlimmer output, thinned
  nlohmann::json events = nlohmann::json::array();   // event_mark / guard_mark
  std::vector<std::string> warnings;
  int64_t cursor = 0;             // live: records already in the page (records.json?since=cursor)
  int64_t graph_version = 0;      // live: the page reloads when the server's graph changes
  nlohmann::json calibration;     // latest_calibration (report/eval_calibration.hpp); null without one
};

Page make_page(const RunData& run, const ReportOptions& options);
std::string render_page(const Page& page, const ReportOptions& options);
std::string render_html(const RunData& run, const ReportOptions& options = {});

}  // namespace dflow::report
