#pragma once
// A run directory as the report reads it: metrics.jsonl (one record a line),
// checkpoints/step-N/ and, when the run wrote it, graph.json (the declared
// pipeline, graph::to_json of its description).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dflow::report {

struct RunData {
  std::filesystem::path run_dir;
  std::vector<nlohmann::json> steps;      // "kind": "step", ascending global_step (a resume supersedes)
  std::vector<nlohmann::json> events;     // every other record kind (checkpoint, guard, alarm, ...), file order
  std::vector<int64_t> checkpoint_steps;  // from checkpoint records and checkpoints/step-N/, sorted, unique
  nlohmann::json graph;                   // graph.json; null when the run has none
  std::vector<std::string> warnings;      // what was tolerated (a truncated last line, a resume)

  const nlohmann::json* last_telemetry() const;  // of the newest step that has one; nullptr when none
};

// A long run has a telemetry snapshot in every step record, the bulk of its
// size. The loader keeps it in the newest `telemetry_tail` steps (enough for
// the analysis) and, before them, in at most about `telemetry_points` steps
// evenly spread (every 2^k-th global step): the snapshots are cumulative, so
// the page's plots stay exact between the points kept.
struct LoadOptions {
  size_t telemetry_points = 4000;
  size_t telemetry_tail = 512;
};

// Reads RUN_DIR. A truncated last line (a killed run) is skipped with a
// warning; any other unparsable line throws std::runtime_error naming
// "path:line". A missing metrics.jsonl throws too.
RunData load_run(const std::filesystem::path& run_dir, const LoadOptions& options = {});

// Adds one parsed record to `run` (the loader's and the live server's path):
// steps are kept ascending; a step at or before the newest one means the run
// was resumed from a checkpoint, and the records it supersedes are dropped.
void add_record(RunData& run, nlohmann::json record);

// A number field that may be written as "nan"/"inf"/"-inf" (JSON has none).
double number_or_nan(const nlohmann::json& value);

}  // namespace dflow::report
