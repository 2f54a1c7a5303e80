#pragma once
// Entry points for the `dflow` command (tools/): `dflow report RUN_DIR [-o FILE]`.
#include <filesystem>
#include <iosfwd>

#include "report/html.hpp"

namespace dflow::report {

// Loads RUN_DIR, writes the HTML report to out_path (default
// RUN_DIR/report.html), prints the findings and the time table to `out`, and
// returns the exit code (0). Errors throw (std::runtime_error naming the file
// and line of a bad record, or the path that could not be written).
int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path, std::ostream& out,
                   const ReportOptions& options = {});
int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path = {});

}  // namespace dflow::report
