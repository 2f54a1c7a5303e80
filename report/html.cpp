#include "report/html.hpp"

#include <chrono>
#include <ctime>
#include <iomanip>
#include <set>
#include <sstream>

#include "report/assets.hpp"
#include "report/eval_calibration.hpp"
#include "report/page_data.hpp"
#include "report/pipeline_svg.hpp"
#include "report/summary_table.hpp"

namespace dflow::report {

std::string local_time_text() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  std::ostringstream out;
  out << std::put_time(&local, "%Y-%m-%d %H:%M:%S");
  return out.str();
}

namespace {

nlohmann::json all_events(const RunData& run) {
  nlohmann::json events = nlohmann::json::array();
  std::set<int64_t> checkpoints;
  for (const auto& record : run.events)
    if (auto mark = event_mark(record); !mark.is_null()) {
      if (mark.value("kind", "") == "checkpoint") checkpoints.insert(mark["s"].get<int64_t>());
      events.push_back(std::move(mark));
    }
  for (int64_t step : run.checkpoint_steps)  // directories of checkpoints no record mentions
    if (!checkpoints.count(step))
      events.push_back({{"s", step}, {"kind", "checkpoint"}, {"label", "checkpoint step-" + std::to_string(step)}});
  for (const auto& step : run.steps)
    if (auto mark = guard_mark(step); !mark.is_null()) events.push_back(std::move(mark));
  return events;
}

}  // namespace

Page make_page(const RunData& run, const ReportOptions& options) {
  Page page;
  page.run_dir = run.run_dir.string();
  page.title = !options.title.empty() ? options.title : std::filesystem::absolute(run.run_dir).lexically_normal().filename().string();
  if (page.title.empty()) page.title = std::filesystem::absolute(run.run_dir).parent_path().filename().string();
  page.pipeline = pipeline_model(run.graph, run.last_telemetry());
  page.analysis = analyze(page.pipeline, run.steps, options.analysis).to_json();
  if (const auto* telemetry = run.last_telemetry()) page.table = summary_table(*telemetry);
  RecordSlimmer slimmer;
  std::vector<nlohmann::json> slim;
  slim.reserve(run.steps.size());
  for (const auto& step : run.steps) slim.push_back(slimmer.slim(step));
  // Thinned twice over: evenly for the training curves, and among the records
  // that still carry telemetry (load_run thins those by step) for the edges.
  std::vector<char> keep(slim.size(), 0);
  std::vector<size_t> with_telemetry;
  for (size_t i = 0; i < slim.size(); ++i)
    if (slim[i].contains("tel")) with_telemetry.push_back(i);
  for (size_t k : thin(with_telemetry.size(), options.max_points, {})) keep[with_telemetry[k]] = 1;
  for (size_t i : thin(slim.size(), options.max_points, [&](size_t i) { return keep[i] || slim[i].contains("g"); }))
    page.records.push_back(std::move(slim[i]));
  page.events = all_events(run);
  page.warnings = run.warnings;
  page.calibration = latest_calibration(run);
  return page;
}

std::string render_page(const Page& page, const ReportOptions& options) {
  const nlohmann::json data = {{"title", page.title},       {"run_dir", page.run_dir},   {"generated", local_time_text()},
                               {"live", options.live},      {"refresh_ms", options.refresh_ms},
                               {"cursor", page.cursor},     {"graph_version", page.graph_version},
                               {"analysis", page.analysis}, {"table", page.table},      {"records", page.records},
                               {"events", page.events},     {"warnings", page.warnings}};
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>dflow \u00b7 " << escape_html(page.title) << "</title>\n<style>\n" << assets::kStyle << "\n</style>\n</head>\n"
      << "<body data-rendered=\"no\">\n<header><h1>dflow \u00b7 " << escape_html(page.title) << "</h1>"
      << "<div class=\"sub\" id=\"subtitle\">" << escape_html(page.run_dir) << "</div></header>\n"
      << "<div id=\"errors\" hidden></div>\n<section id=\"cards\" class=\"cards\"></section>\n"
      << "<section class=\"row\">\n<div class=\"panel pipeline-panel\"><h2>Pipeline as declared</h2>\n"
      << "<p class=\"note\">Edges: mean items waiting of capacity, share of time full (producer blocked) and empty "
         "(consumer starved). Nodes: share of time busy. The hottest node is outlined.</p>\n"
      << pipeline_svg(page.pipeline) << "</div>\n"
      << "<div class=\"panel findings-panel\"><h2>Where the graph waits</h2><ul id=\"findings\"></ul>"
      << "<div id=\"warnings\"></div></div>\n</section>\n"
      << "<section class=\"panel\"><h2>Training</h2><div class=\"events-legend\" id=\"legend-training\"></div>"
      << "<div class=\"grid\" id=\"training-plots\"></div></section>\n"
      << "<section class=\"panel\"><h2>Edges over steps</h2><p class=\"note\">Mean items waiting between two records "
         "(capacity dashed red); share of that time the producer was blocked (orange) and the consumer starved (grey), "
         "right axis.</p><div class=\"events-legend\" id=\"legend-edges\"></div>"
      << "<div class=\"grid small\" id=\"edge-plots\"></div></section>\n"
      << calibration_html(page.calibration)
      << "<section class=\"panel\"><h2>Where time went</h2><pre id=\"table\"></pre></section>\n"
      << "<footer id=\"footer\"></footer>\n"
      << "<script type=\"application/json\" id=\"dflow-data\">" << script_json(data) << "</script>\n"
      << "<script>\n" << assets::kScript << "\n</script>\n</body>\n</html>\n";
  return out.str();
}

std::string render_html(const RunData& run, const ReportOptions& options) { return render_page(make_page(run, options), options); }

}  // namespace dflow::report
