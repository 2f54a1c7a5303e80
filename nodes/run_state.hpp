#pragma once
// Everything one training run shares between its nodes: config, dataset and
// plans, the target replicas, the drafter and its optimizer, progress, sinks.
// Built once before the graph; nodes receive a pointer to it through
// NodeContext::user. The drafter's parameters are touched only by the holder
// of the model token (invariant 1), never by two nodes at once.
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"
#include "data/quarantine.hpp"
#include "model/drafter.hpp"
#include "model/objective.hpp"
#include "model/target.hpp"
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/distributed.hpp"
#include "train/guard.hpp"
#include "train/schedule.hpp"

#include "report/drain_detector.hpp"
#include "report/tensorboard_sink.hpp"

namespace dflow::graph {
class TelemetryBoard;
}
namespace dflow::report {
class LiveServer;
}

namespace dflow::nodes {

namespace fs = std::filesystem;

struct RunOptions {
  std::string resume;    // "", "latest" or a checkpoint path
  report::LiveServer* live = nullptr;  // --serve: records are published to it
  bool overwrite = false;  // a fresh run may delete the out_dir's checkpoints
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                   // "cuda" devices mean cuda:local_rank with several ranks
  train::Distributed* dist = nullptr;   // several ranks: the process groups (null with one)
};

class RunState {
 public:
  RunState(config::Config config, RunOptions options);

  const config::Config config;
  const std::string config_yaml;  // resolved, saved in every checkpoint
  const RunOptions options;
  const fs::path out_dir;
  const fs::path checkpoints_dir;

  // Data and plan.
  data::Dataset dataset;
  data::BatchMode batch_mode = data::BatchMode::TokenBudget;  // from the declared pad_bucket node
  data::PlanOptions plan_options(int epoch) const;
  const data::EpochPlan& plan(int epoch);  // built on first use, cached
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;   // epochs * steps_per_epoch: what the LR schedule spans
  int64_t stop_step = 0;     // steps this invocation ends after (max_steps or total)

  // Models.
  std::vector<std::unique_ptr<model::TargetModel>> targets;  // one per devices.target entry
  std::vector<int64_t> feature_layer_ids;
  torch::Device drafter_device{torch::kCPU};
  model::DFlashDrafter drafter{nullptr};
  std::unique_ptr<train::AdamW> optimizer;
  train::Schedule schedule;
  model::ObjectiveOptions objective;
  int64_t pad_token_id = 0;

  // Progress: the state after `completed_steps` optimizer steps.
  int64_t completed_steps = 0;
  data::PlanCursor cursor;                 // first batch not yet trained on
  train::StabilityGuard guard;              // optimizer_step only; checkpointed
  // Samples excluded from training (README "Stability guard"): those in
  // out_dir/quarantine.jsonl and the checkpoint when the run started (the
  // loader drops them; fixed for the invocation, so the loader running ahead
  // stays deterministic), and the live set, which optimizer_step grows and
  // drafter_step reads, both while holding the model token.
  data::SampleSet quarantined_at_start;
  data::SampleSet quarantined;
  const fs::path quarantine_path;
  // Adds `ids` to the live set and (rank 0) appends them to quarantine.jsonl, fsynced.
  void quarantine_samples(int64_t global_step, const std::string& reason, const std::vector<int64_t>& ids);
  std::string resumed_from;                // checkpoint dir, or empty
  int64_t completed_steps_at_start = 0;    // for this invocation's ETA

  // Sinks and run-wide clocks.
  std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_step_end{};  // optimizer_step only (holds the token)
  std::chrono::steady_clock::time_point last_allreduce_end{};  // accumulate only (holds the token)
  std::ofstream metrics_jsonl;  // written through write_metrics()
  std::unique_ptr<report::TensorBoardSink> tensorboard;  // the tensorboard sink (rank 0), made by write_metrics()
  report::DrainDetector drain;  // metric_sample only
  // Set by the source when the plan has no batch left for this invocation:
  // from then on every edge drains by design, and the drain alarm is off.
  std::atomic<bool> source_exhausted{false};
  std::vector<nlohmann::json> alarms;  // alarm records raised (metric_sample; read after the run)
  const graph::TelemetryBoard* telemetry = nullptr;
  std::atomic<int64_t> checkpoints_written{0};
  std::string last_checkpoint;
  std::mutex summary_mutex;
  nlohmann::json last_record;  // for the end-of-run summary
  nlohmann::json last_eval;    // eval node: the latest evaluation, for the summary
  nlohmann::json best_eval;    // eval node: the best evaluation so far (checkpoints/best)
  // Held-out prompts of the eval node, read and checked before the graph is
  // built (nodes/eval_tau.hpp), so that bad input fails before any node exists.
  std::vector<std::vector<int64_t>> eval_prompts;

  // One record to metrics.jsonl and TensorBoard (when they are sinks) and to the live view.
  // metric_sample and eval both write: one line at a time.
  void write_metrics(const nlohmann::json& record);

  // Named parameters of the drafter (HF names), the optimizer's order.
  std::vector<std::pair<std::string, torch::Tensor>> drafter_parameters() const;
  // CPU copies of everything a checkpoint holds, taken under the model token.
  // Ranks other than 0 never write one: theirs carries only the step.
  train::CheckpointState snapshot() const;
  // Fault injection: the fault of `kind` for `node` (or any node) at `step`, if declared.
  const config::FaultDecl* fault(const std::string& kind, const std::string& node, int64_t step) const;

 private:
  torch::Device parse_device(const std::string& text) const;
  void load_models();
  void plan_run();
  void restore(const std::string& which);
  std::map<int, data::EpochPlan> plans_;
  std::mutex metrics_mutex_;  // guards metrics_jsonl
};

}  // namespace dflow::nodes
