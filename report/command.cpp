#include "report/command.hpp"

#include <fstream>
#include <iostream>
#include <stdexcept>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "report/analysis.hpp"
#include "report/compare_render.hpp"
#include "report/eval_calibration.hpp"
#include "report/summary_table.hpp"

namespace dflow::report {

namespace {
void write_page(const std::filesystem::path& target, const std::string& html, const char* what) {
  std::ofstream file(target, std::ios::binary | std::ios::trunc);
  file << html;
  file.flush();
  if (!file) throw std::runtime_error(target.string() + ": cannot write the " + what);
}
}  // namespace

int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path, std::ostream& out,
                   const ReportOptions& options) {
  const RunData run = load_run(run_dir);
  const std::filesystem::path target = out_path.empty() ? run_dir / "report.html" : out_path;
  const std::string html = render_html(run, options);
  write_page(target, html, "report");
  const Analysis analysis = analyze(run, options.analysis);
  out << bottleneck_summary(analysis);
  if (const auto* telemetry = run.last_telemetry()) out << "\n" << summary_table(*telemetry);
  if (const nlohmann::json calibration = latest_calibration(run); !calibration.is_null())
    out << "\n" << calibration_text(calibration);
  log::info("report", log::str("wrote ", target.string(), " (", run.steps.size(), " step records, ", html.size() / 1024, " KiB)"));
  return 0;
}

int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path) {
  return report_command(run_dir, out_path, std::cout);
}

int compare_command(const std::vector<std::filesystem::path>& run_dirs, const std::filesystem::path& out_path, std::ostream& out,
                    const CompareOptions& options) {
  if (run_dirs.size() < 2) throw ConfigError("compare: give two or more run directories to put side by side");
  const Comparison comparison = compare_runs(run_dirs, options);
  const std::filesystem::path target = out_path.empty() ? std::filesystem::path("compare.html") : out_path;
  const std::string html = render_compare_html(comparison);
  write_page(target, html, "comparison");
  out << compare_table(comparison);
  log::info("compare", log::str("wrote ", target.string(), " (", comparison.runs.size(), " runs, ", html.size() / 1024, " KiB)"));
  return 0;
}

int compare_command(const std::vector<std::filesystem::path>& run_dirs, const std::filesystem::path& out_path) {
  return compare_command(run_dirs, out_path, std::cout);
}

}  // namespace dflow::report
