#include "report/tensorboard_sink.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "report/event_file.hpp"
#include "tensorboard_event.pb.h"

namespace dflow::report {

namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool is_event_file(const fs::path& p) { return p.filename().string().rfind("events.out.tfevents.", 0) == 0; }

// events.out.tfevents.<seconds>.<host>, TensorBoard's naming. Readers take the
// files of a folder in name order, so a second file within the same second
// takes the next free second: names sort as the files were made.
fs::path new_event_file(const fs::path& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  for (auto seconds = static_cast<int64_t>(now_s());; ++seconds) {
    bool taken = false;
    const std::string stem = "events.out.tfevents." + std::to_string(seconds) + ".";
    for (const auto& entry : fs::directory_iterator(dir))
      taken = taken || entry.path().filename().string().rfind(stem, 0) == 0;
    if (!taken) return dir / (stem + host);
  }
}

void add_text(tensorboard::Summary::Value& value, const std::string& markdown) {
  // What TensorBoard's text plugin reads: a rank-0 string tensor tagged "text".
  auto* metadata = value.mutable_metadata();
  metadata->mutable_plugin_data()->set_plugin_name("text");
  metadata->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  auto* tensor = value.mutable_tensor();
  tensor->set_dtype(tensorboard::DT_STRING);
  tensor->mutable_tensor_shape();
  tensor->add_string_val(markdown);
}

}  // namespace

TensorBoardSink::TensorBoardSink(const TensorBoardOptions& options) : resume_step_(options.resume_step) {
  fs::create_directories(options.dir);
  if (resume_step_ < 0)
    for (const auto& entry : fs::directory_iterator(options.dir))
      if (is_event_file(entry.path())) fs::remove(entry.path());
  writer_ = std::make_unique<EventFileWriter>(new_event_file(options.dir), now_s());
  if (resume_step_ >= 0) {
    tensorboard::Event start;
    start.set_wall_time(now_s());
    start.set_step(resume_step_ + 1);
    start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
    writer_->write(start.SerializeAsString());
  }
}

TensorBoardSink::~TensorBoardSink() = default;

const fs::path& TensorBoardSink::file() const { return writer_->path(); }

void TensorBoardSink::write(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("global_step") || !record["global_step"].is_number_integer()) return;
  const int64_t step = record["global_step"].get<int64_t>();
  std::lock_guard lock(mutex_);
  if (resume_step_ >= 0 && step <= resume_step_) return;  // written before the checkpoint this run resumed from
  const auto points = tags_.points(record);
  if (points.empty()) return;
  tensorboard::Event event;
  event.set_wall_time(now_s());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& point : points) {
    auto* value = summary->add_value();
    value->set_tag(point.tag);
    if (point.is_text) add_text(*value, point.text);
    else value->set_simple_value(static_cast<float>(point.value));
  }
  writer_->write(event.SerializeAsString());
}

}  // namespace dflow::report
