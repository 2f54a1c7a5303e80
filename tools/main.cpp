// dflow: train DFlash speculative-decoding drafters with a YAML-declared
// oneTBB flow graph.
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "tools/cli.hpp"
#include "tools/sweep_runner.hpp"

namespace {

// One error line; under `dflow launch` also left where the launcher reads it.
void report_error(const std::exception& e) {
  std::cerr << "dflow: error: " << e.what() << "\n";
  if (const char* file = std::getenv("DFLOW_LAUNCH_ERROR_FILE")) std::ofstream(file) << e.what() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dflow;
  CLI::App app{"dflow: train DFlash speculative-decoding drafters; the training loop is a oneTBB flow graph declared in YAML."};
  app.require_subcommand(1);
  app.footer("To try it: dflow train (the demo). To train a drafter for your own checkpoint: dflow init "
             "CHECKPOINT_DIR --out drafter.yaml, then dflow train drafter.yaml (docs/your-own-model.md). "
             "Every command: docs/commands.md.");
  app.set_version_flag("--version", "dflow 0.1.0");
  cli::Common common;
  cli::Action action;
  cli::add_version_command(app, action);
  cli::add_config_command(app, common, action);
  cli::add_graph_command(app, common, action);
  cli::add_nodes_command(app, action);
  cli::add_init_command(app, common, action);
  cli::add_make_tiny_target_command(app, action);
  cli::add_prepare_command(app, action);
  cli::add_tokenize_command(app, action);
  cli::add_train_command(app, common, action);
  cli::add_launch_command(app, common, action);
  cli::add_inspect_command(app, action);
  cli::add_report_command(app, action);
  cli::add_compare_command(app, action);
  cli::add_eval_command(app, action);
  cli::add_export_command(app, action);
  cli::add_regenerate_command(app, action);
  cli::add_replay_command(app, common, action);
  cli::add_cache_features_command(app, common, action);
  cli::add_extraction_order_command(app, common, action);
  cli::add_sweep_command(app, common, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (!common.log_level.empty()) log::set_level(common.log_level);
    return action ? action() : 0;
  } catch (const ConfigError& e) {
    report_error(e);
    return 2;
  } catch (const std::exception& e) {
    report_error(e);
    return 1;
  }
}
