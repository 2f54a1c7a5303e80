// `dflow report RUN_DIR [-o report.html]`: one self-contained HTML file.
#include "report/command.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_report_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("report", "write a self-contained HTML report of a run: graph, backpressure, loss");
  static std::string run_dir, out;
  sub->add_option("RUN_DIR", run_dir, "the run's out_dir (holds metrics.jsonl)")->required()->check(CLI::ExistingDirectory);
  sub->add_option("-o,--out", out, "output file (default RUN_DIR/report.html)");
  sub->callback([&action] { action = [] { return report::report_command(run_dir, out); }; });
}

}  // namespace dflow::cli
