#pragma once
// Checkpoints: a directory `step-<N>/` holding the drafter in Hugging Face
// layout, the optimizer state, the rollback snapshots guard policy rollback
// keeps (if any), the run state (plan cursor, progress, guard),
// the resolved config and a manifest with a checksum per file. Written under
// a temporary name, synced, then renamed; `latest` names the newest complete
// one; the oldest beyond `keep` are removed. A directory without a valid
// manifest is never taken for a checkpoint.
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dflow::train {

namespace fs = std::filesystem;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct CheckpointState {
  int64_t global_step = 0;          // optimizer steps completed
  nlohmann::json run_state;         // cursor, progress, guard state, world size, ...
  std::string config_yaml;          // the resolved config of the run that wrote it
  NamedTensors drafter_tensors;     // HF parameter names, CPU copies
  nlohmann::json drafter_config;    // HF config.json of the drafter
  NamedTensors optimizer_tensors;   // AdamW::state_tensors(), CPU copies
  int64_t optimizer_steps = 0;
  NamedTensors rollback_tensors;    // RollbackKeeper::tensors(); none unless guard policy rollback kept a snapshot
  nlohmann::json trained_against;   // drafter/trained_against.json (train/trained_against.hpp); none when null
};

struct LoadedCheckpoint {
  fs::path dir;
  int64_t global_step = 0;
  nlohmann::json run_state;
  std::string config_yaml;
  std::map<std::string, torch::Tensor> drafter_tensors;
  nlohmann::json drafter_config;
  std::map<std::string, torch::Tensor> optimizer_tensors;
  int64_t optimizer_steps = 0;
  std::map<std::string, torch::Tensor> rollback_tensors;  // empty when the checkpoint has none
  nlohmann::json trained_against;  // null when the checkpoint has none (a dflow before the record wrote it)
};

// Writing: train/checkpoint_writer.hpp (a run's one writer).

// The `eval` record in the manifest of the checkpoint `best` names, if any.
std::optional<nlohmann::json> best_checkpoint_eval(const fs::path& checkpoints_dir);

// "latest" or "best" (within checkpoints_dir), a path to a step-<N> (or
// best-step-<N>) directory, a path to a `latest` or `best` file, or a run
// directory (its latest).
fs::path resolve_checkpoint(const fs::path& checkpoints_dir, const std::string& which);

// Reads and verifies every file against the manifest; throws naming the file.
LoadedCheckpoint read_checkpoint(const fs::path& dir);

// Complete checkpoints in checkpoints_dir, oldest first.
std::vector<fs::path> list_checkpoints(const fs::path& checkpoints_dir);

// Keys whose values differ between two resolved configs, limited to the
// sections that decide what a resume computes: "train.lr: 0.001 -> 0.002".
std::vector<std::string> incompatible_config_keys(const std::string& saved_yaml, const std::string& current_yaml);

}  // namespace dflow::train
