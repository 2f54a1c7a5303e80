// `dflow sweep [CONFIG] --out DIR --vary KEY=v1,v2,... [--seeds N] [--parallel K]`:
// a grid of variants of one config, each a run under DIR, compared at the end
// (tools/sweep_runner.hpp); `--compare-only` writes the comparison of what is
// there now, also while another sweep process runs.
#include <filesystem>
#include <thread>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "nodes/figure_terms.hpp"
#include "nodes/registry.hpp"
#include "tools/sweep_runner.hpp"

namespace dflow::cli {

void add_sweep_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand("sweep", "run a grid of variants of one config (--vary KEY=v1,v2,... x --seeds N), each in "
                                          "its own run directory, and compare them with seeds grouped");
  static SweepOptions options;
  static std::vector<std::string> vary, named;
  static bool compare_only = false;
  static double tau_target = report::kUnknownValue;
  static size_t recent_steps = 50;
  sub->add_option("CONFIG", options.config_file, "YAML config file (the embedded demo when absent)")->check(CLI::ExistingFile);
  sub->add_option("--out", options.out_dir, "the sweep's directory: one run directory per variant, sweep.json, logs/, "
                                            "compare.html and compare.txt")->required();
  sub->add_option("--vary", vary, "KEY=v1,v2,...: an axis of the grid; any key --set takes, pipeline nodes and edges "
                                  "included (repeatable)");
  sub->add_option("--variant", named, "'NAME: KEY=VALUE KEY=VALUE ...': a named variant setting several keys at once "
                                      "(a recipe); the named variants form one axis of the grid (repeatable; 'NAME' alone: "
                                      "the config as it is)");
  sub->add_option("--seeds", options.seeds, "seeds per variant: run.seed, run.seed + 1, ... (default 1)")->check(CLI::PositiveNumber);
  sub->add_option("--parallel", options.parallel, "variants at a time, the machine's threads divided between them (default 1)")
      ->check(CLI::Range(1, 64));
  sub->add_flag("--compare-only", compare_only, "run nothing: write DIR's comparison of the variants with records now");
  sub->add_option("--tau-target", tau_target, "the tau (above 1) whose wall time to reach is compared, seeds grouped (no such row without it)");
  sub->add_option("--last", recent_steps, "steps in the recent throughput window (default 50)")->check(CLI::PositiveNumber);
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      options.overrides = common.overrides;
      options.log_level = common.log_level;
      options.compare.tau_target = tau_target;
      options.compare.recent_steps = recent_steps;
      options.compare.figure_terms = [](const report::RunConfig& config) {
        return nodes::figure_terms(config, nodes::default_registry());
      };
      // The sweep's own lines, not the comparison's progress (the runs log to logs/).
      if (common.log_level.empty()) log::set_level("warn");
      if (compare_only) {
        if (!std::filesystem::exists(options.out_dir / "sweep.json"))
          throw ConfigError(options.out_dir.string() + " holds no sweep (no sweep.json): --compare-only compares the "
                            "variants of a sweep started with the same --out");
        if (!write_sweep_comparison(options.out_dir, options.compare, true))
          throw ConfigError(options.out_dir.string() + ": fewer than two of its variants have records yet");
        return 0;
      }
      options.axes.clear();
      if (!named.empty()) {
        config::SweepAxis recipes;
        for (const auto& n : named) config::add_named_variant(recipes, n);
        options.axes.push_back(std::move(recipes));
      }
      for (const auto& v : vary) options.axes.push_back(config::parse_vary(v));
      return run_sweep(options);
    };
  });
}

}  // namespace dflow::cli
