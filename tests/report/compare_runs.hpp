#pragma once
// Small hand-written run directories for the compare tests: step and eval
// records as the optimizer and the eval node write them (only the fields
// compare reads), and a checkpoint's config.yaml.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace dflow::report::test {

// elapsed_s counts from the process's start; its first step has step_s == elapsed_s.
inline nlohmann::json step_record(int64_t step, double loss, double elapsed_s, double step_s, double real_tokens = 1000) {
  return {{"kind", "step"},          {"global_step", step},
          {"total_steps", 20},       {"loss", loss},
          {"real_tokens", real_tokens},
          {"time", {{"step_s", step_s}, {"elapsed_s", elapsed_s}, {"tokens_per_s", real_tokens / step_s}, {"eta_s", 0.0}}}};
}

inline nlohmann::json eval_record(int64_t step, double tau) {
  return {{"kind", "eval"}, {"global_step", step}, {"mean_tau", tau}, {"best", false}, {"time", {{"eval_s", 0.5}}}};
}

// metrics.jsonl with the records, then `tail` as written (a half line: no newline).
inline void write_metrics(const std::filesystem::path& dir, const std::vector<nlohmann::json>& records, const std::string& tail = "") {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "metrics.jsonl");
  for (const auto& r : records) out << r.dump() << "\n";
  out << tail;
}

inline void write_checkpoint_config(const std::filesystem::path& dir, const std::string& checkpoint, const std::string& yaml) {
  std::filesystem::create_directories(dir / "checkpoints" / checkpoint);
  std::ofstream(dir / "checkpoints" / checkpoint / "config.yaml") << yaml;
}

// A resolved config as dflow writes it, with the values a test varies.
inline std::string config_yaml(const std::string& out_dir, const std::string& lr, const std::string& pad_type, int target_replicas) {
  return "run: {name: demo, out_dir: " + out_dir + ", seed: 1234}\n"
         "train: {epochs: 6, lr: " + lr + ", schedule: cosine}\n"
         "data: {buckets: [64, 128]}\n"
         "pipeline:\n  nodes:\n"
         "    - {name: load, type: load.shards}\n"
         "    - {name: pad, type: " + pad_type + ", params: {token_budget: 2048}}\n" +
         (target_replicas == 1 ? "    - {name: target, type: target_forward}\n"
                               : "    - {name: target, type: target_forward, replicas: " + std::to_string(target_replicas) + "}\n") +
         "  edges:\n"
         "    - {from: load, to: pad, capacity: 8}\n"
         "    - {from: pad, to: target, capacity: 4}\n";
}

}  // namespace dflow::report::test
