#include "report/command.hpp"

#include <fstream>
#include <iostream>
#include <stdexcept>

#include "config/log.hpp"
#include "report/analysis.hpp"
#include "report/summary_table.hpp"

namespace dflow::report {

int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path, std::ostream& out,
                   const ReportOptions& options) {
  const RunData run = load_run(run_dir);
  const std::filesystem::path target = out_path.empty() ? run_dir / "report.html" : out_path;
  const std::string html = render_html(run, options);
  {
    std::ofstream file(target, std::ios::binary | std::ios::trunc);
    file << html;
    file.flush();
    if (!file) throw std::runtime_error(target.string() + ": cannot write the report");
  }
  const Analysis analysis = analyze(run, options.analysis);
  out << bottleneck_summary(analysis);
  if (const auto* telemetry = run.last_telemetry()) out << "\n" << summary_table(*telemetry);
  log::info("report", log::str("wrote ", target.string(), " (", run.steps.size(), " step records, ", html.size() / 1024, " KiB)"));
  return 0;
}

int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path) {
  return report_command(run_dir, out_path, std::cout);
}

}  // namespace dflow::report
