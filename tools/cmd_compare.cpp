// `dflow compare RUN_DIR... [-o compare.html]`: runs side by side, a table on
// stdout and one self-contained HTML page.
#include "nodes/figure_terms.hpp"
#include "nodes/registry.hpp"
#include "report/command.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_compare_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("compare", "put two or more runs side by side: config differences, loss and tau curves, "
                                            "throughput, where each graph waited, and which run wins");
  static std::vector<std::filesystem::path> run_dirs;
  static std::string out;
  static size_t recent_steps = 50;
  static double tau_target = report::kUnknownValue;
  sub->add_option("RUN_DIR", run_dirs, "two or more runs' out_dirs (each holds metrics.jsonl)")->required()->check(CLI::ExistingDirectory);
  sub->add_option("-o,--out", out, "the HTML page (default compare.html in the current directory)");
  sub->add_option("--last", recent_steps, "steps in the recent throughput window (default 50)")->check(CLI::PositiveNumber);
  sub->add_option("--tau-target", tau_target, "the tau (above 1) whose wall time to reach is compared, seeds grouped (no such row without it)");
  sub->callback([&action] {
    action = [] {
      return report::compare_command(run_dirs, out, std::cout, {.recent_steps = recent_steps, .tau_target = tau_target,
                                                                .figure_terms = [](const report::RunConfig& config) {
                                                                  return nodes::figure_terms(config, nodes::default_registry());
                                                                }});
    };
  });
}

}  // namespace dflow::cli
