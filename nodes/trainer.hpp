#pragma once
// One training run: the run context, the trainable state, the graph the YAML
// declares, run to the end (or the first failure), and a summary.
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"
#include "nodes/run_context.hpp"

namespace dflow::nodes {

struct TrainResult {
  int64_t completed_steps = 0;
  int64_t total_steps = 0;
  nlohmann::json last_record;  // the final step's record (empty if no step ran)
  std::string last_checkpoint;
  std::string metrics_path;
  std::string tensorboard_dir;  // empty without the tensorboard sink
  nlohmann::json telemetry;    // the graph's telemetry at the end
  std::vector<std::string> findings;    // where the graph waited, in words (report::analyze)
  std::vector<nlohmann::json> alarms;   // drain alarms raised during the run
  std::vector<nlohmann::json> checkpoint_failures;  // checkpoints not saved (on_write_error: continue)
  nlohmann::json last_eval;    // the eval node's latest and best records (empty without one)
  nlohmann::json best_eval;
  std::string batching;        // the pad_bucket node's kind and params
  int64_t real_tokens = 0;     // over this invocation's steps
  int64_t padded_tokens = 0;
};

// Sets the thread counts from run.threads / run.torch_threads, builds and runs
// the declared graph. Throws graph::NodeError (naming node and message) when a
// node fails; the last complete checkpoint is left intact.
TrainResult run_training(const config::Config& config, const RunOptions& options);

// The end-of-run summary for the console.
std::string summarize(const TrainResult& result);

}  // namespace dflow::nodes
