#pragma once
// `dflow sweep`: runs a grid of variants of one config (config/sweep_plan.hpp)
// as `dflow train` processes, K at a time, each in its own run directory
// under the sweep's out directory, and keeps the comparison of them there.
// The sweep's state (sweep.json) says which variants finished, so a rerun of
// the same command skips those and resumes the others from their latest
// checkpoint; Ctrl-C stops the running ones and starts no more.
#include <filesystem>
#include <string>
#include <vector>

#include "config/sweep_plan.hpp"
#include "report/compare.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

struct SweepOptions {
  std::string config_file;              // "" : the demo
  std::vector<std::string> overrides;   // --set, for every variant
  std::vector<config::SweepAxis> axes;  // --vary
  int seeds = 1;
  int parallel = 1;                     // variants at a time
  std::filesystem::path out_dir;
  std::string log_level;                // --log-level for the runs ("" : theirs)
  report::CompareOptions compare;
};

// `dflow sweep` on the command line (tools/cmd_sweep.cpp).
void add_sweep_command(CLI::App& app, Common& common, Action& action);

// Runs what is left of the sweep and writes the comparison; returns the exit
// code (0 all done, 1 some failed, 130 interrupted). A grid value that the
// config refuses, or an out directory that holds another sweep, throws
// ConfigError before anything runs.
int run_sweep(const SweepOptions& options);

// Writes out_dir/compare.html and compare.txt from the variants that have
// records (two at least), and prints the table; false when fewer than two have.
bool write_sweep_comparison(const std::filesystem::path& out_dir, const report::CompareOptions& options, bool print);

}  // namespace dflow::cli
