#pragma once
// Entry points for the `dflow` command (tools/): `dflow report RUN_DIR [-o FILE]`
// and `dflow compare RUN_DIR... [-o FILE]`.
#include <filesystem>
#include <iosfwd>
#include <vector>

#include "report/compare.hpp"

#include "report/html.hpp"

namespace dflow::report {

// Loads RUN_DIR, writes the HTML report to out_path (default
// RUN_DIR/report.html), prints the findings and the time table to `out`, and
// returns the exit code (0). Errors throw (std::runtime_error naming the file
// and line of a bad record, or the path that could not be written).
int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path, std::ostream& out,
                   const ReportOptions& options = {});
int report_command(const std::filesystem::path& run_dir, const std::filesystem::path& out_path = {});

// Compares the runs (two or more), writes the HTML page to out_path (default
// compare.html in the current directory), prints the table to `out`, and
// returns the exit code (0). A directory that is no run, or fewer than two,
// throws ConfigError (exit 2); a file that cannot be read or written throws
// std::runtime_error naming it.
int compare_command(const std::vector<std::filesystem::path>& run_dirs, const std::filesystem::path& out_path, std::ostream& out,
                    const CompareOptions& options = {});
int compare_command(const std::vector<std::filesystem::path>& run_dirs, const std::filesystem::path& out_path = {});

}  // namespace dflow::report
