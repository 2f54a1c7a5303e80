#pragma once
// Does the drafter draft? Speculative decoding against target-only decoding
// on the same prompts, in one run: acceptance length tau, its distribution,
// and the speed-up; greedy runs also check losslessness (every output equals
// target-only greedy decoding).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "drafter/drafter.hpp"
#include "target/target.hpp"

namespace dflow::train {

struct EvalOptions {
  int64_t max_new_tokens = 64;
  int64_t max_prompts = 0;       // 0: all
  double temperature = 0.0;      // 0: greedy; > 0: speculative sampling
  uint64_t seed = 0;             // sampling: per prompt hash(seed, prompt index)
  bool compare_with_target = true;  // also decode target-only: speed-up, and (greedy) the losslessness check
  int64_t keep_outputs = 0;         // the first N prompts' outputs are kept in the report (dflow eval --show)
};

// One prompt's speculative output: tokens[0] is the target's, then per cycle
// acceptance_lengths[c] - 1 accepted drafts and one target token.
struct EvalOutput {
  std::vector<int64_t> prompt;
  std::vector<int64_t> tokens;
  std::vector<int64_t> acceptance_lengths;
};

// The calibration of the acceptance a drafter kind predicts (a confidence
// head: KindModules::predicts_acceptance) at block slot k, over every cycle
// of every prompt in which slots 1 .. k-1 were accepted (slot k was verified
// on a correct prefix): how many such cycles, the mean predicted acceptance,
// and the share of them that accepted slot k.
struct ConfidenceCalibration {
  int64_t position = 0;   // k = 1 .. B-1
  int64_t verified = 0;
  double predicted = 0;   // mean prediction over the verified cycles
  double observed = 0;    // accepted / verified
};

struct EvalReport {
  int64_t prompts = 0;
  double mean_tau = 0;                     // mean over prompts of each prompt's mean tau
  std::vector<int64_t> tau_histogram;      // cycles with tau = 1 .. B (index tau-1)
  std::vector<double> acceptance_by_position;  // share of cycles whose draft k (1..B-1) was accepted
  int64_t mismatched_prompts = 0;          // greedy: speculative output differs from target-only greedy
  bool lossless_checked = false;           // greedy and compared with the target
  double temperature = 0;
  int64_t cycles = 0;                      // drafting cycles (target verification passes)
  int64_t generated_tokens = 0;            // by speculative decoding
  double speculative_s = 0;                // time spent in speculative decoding
  double speculative_tokens_per_s = 0;
  double target_tokens_per_s = 0;
  std::vector<EvalOutput> outputs;         // the first options.keep_outputs prompts
  std::vector<ConfidenceCalibration> confidence_calibration;  // slots 1 .. B-1; empty for a kind that predicts none
  nlohmann::json to_json() const;
  std::string summary() const;
  // [{"position", "verified", "predicted", "observed"}] (the eval record's
  // "confidence_calibration"); null for a kind that predicts none.
  nlohmann::json calibration_json() const;
};

// Prompts from JSONL: {"prompt_ids": [...]} or a training sample
// {"input_ids": [...], "loss_mask": [...]} (its prompt = tokens before the first loss_mask 1).
// With `lines`, also each prompt's line number in the file (for errors).
std::vector<std::vector<int64_t>> read_prompts(const std::filesystem::path& jsonl, std::vector<int64_t>* lines = nullptr);

EvalReport evaluate_drafter(drafter::DFlashDrafterImpl& drafter, const target::TargetModel& target,
                            const std::vector<std::vector<int64_t>>& prompts, const EvalOptions& options);

}  // namespace dflow::train
