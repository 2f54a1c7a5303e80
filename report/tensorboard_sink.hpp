#pragma once
// The `tensorboard` metrics sink: metrics records (the JSON that
// metrics.jsonl holds) as TensorBoard scalars and text, in an event file under
// <run.out_dir>/tensorboard/, so `tensorboard --logdir <run.out_dir>` shows
// the run. What becomes which tag is listed in tensorboard_tags.cpp.
//
// Resume: a resumed run writes a new file that starts with a SessionLog START
// at the first step it will train (TensorBoard's restart marker: readers drop
// what earlier files hold for that step and later, i.e. steps an interrupted
// run recorded past its last checkpoint), and never writes a record of a step
// at or before the checkpoint it resumed from. A fresh run deletes the event
// files of an earlier run in the same directory, as metrics.jsonl starts anew.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dflow::report {

class EventFileWriter;

struct TensorBoardOptions {
  std::filesystem::path dir;   // the event files' folder: <run.out_dir>/tensorboard
  int64_t resume_step = -1;    // the checkpoint's global_step when resuming; -1: a fresh run
};

// One scalar or text point of a record, before it is encoded.
struct TensorBoardPoint {
  std::string tag;
  double value = 0;   // scalars (NaN/Inf as such)
  std::string text;   // text points (markdown)
  bool is_text = false;
};

// Turns records into points. Keeps the previous telemetry snapshot, since a
// node's busy share is over the interval between two records.
class TensorBoardTags {
 public:
  std::vector<TensorBoardPoint> points(const nlohmann::json& record);

 private:
  std::map<std::string, double> previous_busy_s_;  // node -> busy_s summed over replicas
  double previous_elapsed_s_ = 0;
};

class TensorBoardSink {
 public:
  explicit TensorBoardSink(const TensorBoardOptions& options);
  ~TensorBoardSink();
  TensorBoardSink(const TensorBoardSink&) = delete;
  TensorBoardSink& operator=(const TensorBoardSink&) = delete;

  // One record (step, eval, guard or alarm; others are ignored). Thread-safe.
  void write(const nlohmann::json& record);
  const std::filesystem::path& file() const;

 private:
  std::mutex mutex_;
  std::unique_ptr<EventFileWriter> writer_;
  TensorBoardTags tags_;
  int64_t resume_step_;
};

}  // namespace dflow::report
