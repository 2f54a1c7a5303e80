#pragma once
// A sweep's state, `--out`/sweep.json: the sweep it is (config and a digest
// of its contents, --set, the grid, seeds: a rerun must be the same command
// on the same config) and each variant's status
// (running, done, interrupted, failed) with its exit code and seconds. It is
// replaced atomically (written aside, then renamed) after every change.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

#include "tools/sweep_runner.hpp"

namespace dflow::cli {

// The state in out_dir ({} when there is none yet); ConfigError when the
// file is no sweep state.
nlohmann::json read_sweep_state(const std::filesystem::path& out_dir);
void write_sweep_state(const std::filesystem::path& out_dir, const nlohmann::json& state);

// The state of this sweep in out_dir, made or checked (ConfigError naming
// what differs when it holds another sweep), with the variants' order.
nlohmann::json open_sweep_state(const SweepOptions& options, const std::vector<config::SweepVariant>& variants);

}  // namespace dflow::cli
