#pragma once
// Replay: the loss and grad norm of chosen samples against a checkpoint, to
// test hypotheses about a guard event ("long-sequence buckets produce larger
// gradients", "sample 803 alone makes the spike"). Each sample runs alone,
// padded to its bucket length as in training, then all of them together as
// one batch: target forward, drafter forward and backward under the DFlash
// objective. Nothing is updated. Anchors are drawn with the run's seed as
// for batch 0 of epoch 0, so a value matches a training step's in
// distribution, not digit for digit.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace dflow::train {

struct ReplayRow {
  std::string label;                 // "sample 803" or "together"
  std::vector<int64_t> sample_ids;
  std::vector<int64_t> lengths;      // real tokens per sample
  int padded_length = 0;             // bucket length the batch is padded to
  double loss = 0;                   // sum(w * CE) / sum(w)
  double loss_weight = 0;            // sum(w)
  double grad_norm = 0;              // of the loss above (gradients divided by sum(w), as in training)
  int64_t anchors = 0;
};

struct ReplayReport {
  std::string checkpoint;
  int64_t global_step = 0;
  std::vector<ReplayRow> rows;
  std::string table() const;
  nlohmann::json to_json() const;
};

// `config`: the run's (data.train, model.target, train.*). Throws
// ConfigError naming every sample id the dataset does not hold.
ReplayReport replay_samples(const config::Config& config, const std::filesystem::path& checkpoint_dir,
                            const std::vector<int64_t>& sample_ids);

}  // namespace dflow::train
