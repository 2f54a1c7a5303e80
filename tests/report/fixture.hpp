#pragma once
// Realistic run directories for the report tests: the default pipeline
// (config/default.yaml) with its telemetry simulated step by step, written as
// the training run writes them (metrics.jsonl, graph.json, checkpoints/step-N/).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dflow::report::test {

struct FixtureOptions {
  int steps = 300;              // step records written
  int steps_per_epoch = 100;
  int total_steps = 300;
  std::string bound = "target"; // the node ~95% busy; the edges in front of it are full
  std::string draining_edge{};  // a telemetry edge whose occupancy falls steadily ("" = none)
  double drain_start = 8.0;     // its occupancy at step 0 ...
  double drain_slope = -0.02;   // ... and its trend (items/step): empty at step 400 by default
  int checkpoint_every = 100;
  int guard_skip_step = 150;    // a non-finite loss the guard skipped (-1: none)
  int target_replicas = 2;
  std::string target_type = "target_forward";  // or features.cached: the feature source
  // What the feature source's kind declares about its load, as graph.json
  // carries it (graph::NodeSpec::compute, when_bound); the drafter is compute.
  bool target_compute = true;
  std::string target_when_bound{};
  bool write_graph = true;
  bool alarms = true;           // run a DrainDetector and write its alarms, as the metrics node will
  uint64_t seed = 7;
};

// A fresh, empty directory under the build tree.
std::filesystem::path fresh_dir(const std::string& name);
// The build directory (screenshots and reports land there).
std::filesystem::path build_dir();

// The default pipeline as graph::to_json(describe(...)) writes it.
nlohmann::json default_graph(int target_replicas, const std::string& target_type = "target_forward",
                             bool target_compute = true, const std::string& target_when_bound = "");

// Every record of the run, in the order metrics.jsonl holds them.
std::vector<nlohmann::json> fixture_records(const FixtureOptions& options);

// Writes metrics.jsonl, graph.json and checkpoints/step-N/ into dir.
void write_fixture_run(const std::filesystem::path& dir, const FixtureOptions& options);

}  // namespace dflow::report::test
