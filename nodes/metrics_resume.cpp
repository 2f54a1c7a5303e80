#include "nodes/metrics_resume.hpp"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/log.hpp"
#include "data/output_file.hpp"

namespace dflow::nodes {

namespace fs = std::filesystem;

namespace {

// The record of the checkpoint's step, which the checkpoint carries; null without one.
nlohmann::json saved_step_record(const fs::path& checkpoint, int64_t step) {
  std::ifstream in(checkpoint / "state.json");
  const auto state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.contains("step_record")) return nullptr;
  const auto& saved = state["step_record"];
  if (saved.value("global_step", int64_t{-1}) != step) return nullptr;
  return saved;
}

}  // namespace

void trim_metrics_to_checkpoint(const fs::path& metrics, const fs::path& checkpoint, int64_t checkpoint_step,
                                bool restore_record) {
  if (!fs::is_regular_file(metrics)) return;  // none yet, or a device (a character device never ends)
  std::ifstream in(metrics, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + metrics.string() + " to resume it");
  const fs::path tmp = metrics.string() + ".tmp";
  std::map<std::string, int64_t> dropped;  // kind -> records past the checkpoint
  size_t partial_bytes = 0;
  nlohmann::json restored = nullptr;
  try {
    data::OutputFile out(tmp);
    bool has_checkpoint_record = false;
    for (std::string line; std::getline(in, line);) {
      if (in.eof()) {  // no newline after it: half a record
        partial_bytes = line.size();
        break;
      }
      const auto record = nlohmann::json::parse(line, nullptr, false);
      if (record.is_object() && record.contains("global_step") && record["global_step"].is_number_integer()) {
        const int64_t step = record["global_step"].get<int64_t>();
        const std::string kind = record.value("kind", "record");
        if (step > checkpoint_step) {
          ++dropped[kind];
          continue;
        }
        has_checkpoint_record = has_checkpoint_record || (kind == "step" && step == checkpoint_step);
      }
      line += '\n';
      out.write(line.data(), line.size());
    }
    if (restore_record && !has_checkpoint_record) restored = saved_step_record(checkpoint, checkpoint_step);
    if (!restored.is_null()) {
      const std::string line = restored.dump() + "\n";
      out.write(line.data(), line.size());
    }
    if (dropped.empty() && partial_bytes == 0 && restored.is_null()) {
      fs::remove(tmp);  // nothing to change: the file stays as it is
      return;
    }
    out.close_synced();
    fs::rename(tmp, metrics);
    data::sync_directory(metrics.parent_path());
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw std::runtime_error("cannot resume " + metrics.string() + " at checkpoint step " +
                             std::to_string(checkpoint_step) + " (left as it was): " + e.what());
  }
  if (partial_bytes > 0)
    log::warn("train", log::str("metrics.jsonl ended in a partial record (", partial_bytes,
                                " bytes, a run killed while writing it); removed"));
  if (!dropped.empty()) {
    std::string what;
    for (const auto& [kind, count] : dropped) what += (what.empty() ? "" : ", ") + std::to_string(count) + " " + kind;
    log::info("train", log::str("metrics.jsonl: removed the records past checkpoint step ", checkpoint_step, " (", what,
                                "), which this run writes again"));
  }
  if (!restored.is_null())
    log::warn("train", log::str("metrics.jsonl lacked the record of step ", checkpoint_step,
                                " (the run ended between saving that checkpoint and writing it); restored from ",
                                checkpoint.string()));
}

}  // namespace dflow::nodes
