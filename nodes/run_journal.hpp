#pragma once
// What a run reports while it runs, shared by the nodes that report: records
// to metrics.jsonl and the live view, the end-of-run summary (last record,
// evaluations, checkpoints, alarms) and the source's end-of-data signal.
// Thread-safe; it holds no training state.
//
// A metrics sink that cannot write (a full disk) never stops the run and
// never loses records silently: the first failed record raises an
// `alarm` record (metrics_not_written, naming the sink, file, step and
// reason) in the log, the live view and the sinks that still write; the
// sink tries again with every record (a record is written whole or not at
// all); and the end-of-run summary says how many records of which steps each
// sink lacks.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nodes/run_context.hpp"
#include "report/append_file.hpp"
#include "report/tensorboard_sink.hpp"

namespace dflow::nodes {

struct RunSummary {
  int64_t completed_steps = 0;
  nlohmann::json last_record;  // the final step's record (empty if no step ran)
  nlohmann::json last_eval;    // an eval node's latest and best evaluations
  nlohmann::json best_eval;
  std::string last_checkpoint;
  int64_t checkpoints_written = 0;
  // Drain alarms raised, then one metrics_not_written per sink that lost
  // records: {"sink", "path", "records", "first_step", "last_step", "kinds", "message"}.
  std::vector<nlohmann::json> alarms;
  std::vector<nlohmann::json> checkpoint_failures;  // {"global_step", "message"}: writes that failed (on_write_error: continue)
  int64_t real_tokens = 0;    // over the step records of this invocation
  int64_t padded_tokens = 0;
};

// One metrics sink's writes that failed: what the summary says it lacks.
struct SinkLoss {
  std::string sink;   // "jsonl", "tensorboard"
  std::string path;
  bool failing = false;  // the last write failed
  int64_t records = 0;
  int64_t first_step = -1, last_step = -1;
  std::map<std::string, int64_t> kinds;  // record kind -> records lost
  std::string message;  // the first failure's
};

class RunJournal {
 public:
  // A fresh run starts a fresh metrics.jsonl; a resumed one keeps its
  // records up to the checkpoint's step and appends (nodes/metrics_resume.hpp).
  explicit RunJournal(const RunContext& run);
  ~RunJournal();

  // One record to metrics.jsonl and TensorBoard (when they are sinks) and to the live view; one at a time.
  void write(const nlohmann::json& record);
  void publish_live(const nlohmann::json& record);  // the live view only

  void step_completed(int64_t global_step);  // optimizer_step
  void record_written(nlohmann::json record);  // metric_sample
  void eval_done(nlohmann::json record, bool best);
  void checkpoint_written(const std::string& dir);
  void alarm_raised(nlohmann::json alarm);
  void checkpoint_failed(int64_t global_step, const std::string& message);
  RunSummary summary() const;

  // Set by the source when the plan has no batch left for this invocation:
  // from then on every edge drains by design, and the drain alarm is off.
  std::atomic<bool> source_exhausted{false};

 private:
  // Writes `record` to each sink; returns the alarms of sinks that just began to fail.
  std::vector<nlohmann::json> write_to_sinks(const nlohmann::json& record);
  template <class Write>
  void write_to(SinkLoss& loss, const nlohmann::json& record, Write&& write, std::vector<nlohmann::json>& alarms);

  const RunContext& run_;
  bool jsonl_ = false;
  mutable std::mutex write_mutex_;
  std::unique_ptr<report::AppendFile> metrics_jsonl_;     // rank 0, when a sink
  std::unique_ptr<report::TensorBoardSink> tensorboard_;  // rank 0, when a sink
  SinkLoss jsonl_loss_, tensorboard_loss_;                // guarded by write_mutex_
  mutable std::mutex summary_mutex_;
  RunSummary summary_;
};

}  // namespace dflow::nodes
