#pragma once
// The dflow command: each subcommand lives in its own cmd_*.cpp and registers
// itself on the CLI11 app. A subcommand's action runs after parsing; main()
// maps its exceptions to exit codes (2: usage/config, 1: runtime failure).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dflow::cli {

struct Common {
  std::string log_level;                 // empty: from the config
  std::vector<std::string> overrides;    // --set section.key=value
};

using Action = std::function<int()>;

// Each adds one subcommand and stores its action in `action` when chosen.
void add_version_command(CLI::App& app, Action& action);
void add_config_command(CLI::App& app, Common& common, Action& action);
void add_graph_command(CLI::App& app, Common& common, Action& action);
void add_nodes_command(CLI::App& app, Action& action);
void add_make_tiny_target_command(CLI::App& app, Action& action);
void add_prepare_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_train_command(CLI::App& app, Common& common, Action& action);
void add_launch_command(CLI::App& app, Common& common, Action& action);
void add_inspect_command(CLI::App& app, Action& action);
void add_report_command(CLI::App& app, Action& action);
void add_compare_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);
void add_regenerate_command(CLI::App& app, Action& action);
void add_replay_command(CLI::App& app, Common& common, Action& action);
void add_cache_features_command(CLI::App& app, Common& common, Action& action);
void add_extraction_order_command(CLI::App& app, Common& common, Action& action);
void add_init_command(CLI::App& app, Common& common, Action& action);

// Adds --set and --log-level to a subcommand.
void add_common_options(CLI::App& sub, Common& common);

}  // namespace dflow::cli
