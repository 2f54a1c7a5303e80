#pragma once
// `dflow regenerate --features DIR`: the target's generation already computes
// the hidden states the drafter reads (its prefill and each decode step), so
// they are kept and written to a feature cache (data/feature_cache.hpp) as
// the JSONL is written, one record per output line, sample id = the line's
// 0-based index in the output (the id `dflow prepare` gives it). The target
// then runs once for both the data and the features.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <vector>

#include "data/feature_cache.hpp"
#include "target/target.hpp"

namespace dflow::train {

struct FeatureCaptureOptions {
  std::filesystem::path dir;         // the cache; empty: no features
  std::filesystem::path target_dir;  // fingerprinted into the manifest
  data::FeatureDtype dtype = data::FeatureDtype::bfloat16;
  std::vector<int64_t> layer_ids;    // regenerate_feature_layers()
  std::ostream* log = nullptr;       // the projected size and what was written

  bool enabled() const { return !dir.empty(); }
};

// The layers training reads with these drafter options, chosen as training
// chooses them (drafter::make_drafter_spec): explicit ids when given, else
// `num_target_features` ids by the DFlash formula (0: as many as the
// config's default number of draft layers).
std::vector<int64_t> regenerate_feature_layers(const target::HFConfig& target, int64_t num_target_features,
                                               const std::vector<int64_t>& target_layer_ids);

// The cache a regenerate run writes: creates or checks its manifest (source
// "regenerate") and appends records through one writer named "regen".
class FeatureCapture {
 public:
  FeatureCapture(const target::TargetModel& target, FeatureCaptureOptions options);

  const std::vector<int64_t>& layer_ids() const { return options_.layer_ids; }
  uint64_t row_bytes() const { return row_bytes_; }
  // Samples already published in the cache (an earlier run's), for resuming.
  const data::FeatureCacheReader& existing() const { return *existing_; }

  // Logs the projected size of `positions` rows (an upper bound the caller
  // sums: prompt + max_new_tokens per sample) and throws DataError when the
  // disk lacks it.
  void reserve(uint64_t positions);
  // Whether sample_id's record is still to write: false when the cache
  // already holds it for these tokens (a rerun that generated the same line:
  // same target, same tokens, same features). Throws DataError naming the
  // cache when it holds the id for other tokens: the reader keeps the first
  // record of an id, so a new one would never be read. Callers ask before
  // writing the line, so that a refusal leaves the JSONL and the cache agreeing.
  bool needs(int64_t sample_id, const std::vector<int64_t>& input_ids);
  // One output line's record: features [L, n * H] of input_ids (length L).
  void append(int64_t sample_id, const std::vector<int64_t>& input_ids, const torch::Tensor& features);
  // Publishes what was appended and logs a line about it.
  void publish();
  int64_t samples_written() const { return writer_->samples_written(); }
  int64_t samples_already_cached() const { return already_cached_; }

 private:
  FeatureCaptureOptions options_;
  uint64_t row_bytes_ = 0;
  std::unique_ptr<data::FeatureCacheReader> existing_;
  std::unique_ptr<data::FeatureCacheWriter> writer_;
  std::vector<unsigned char> record_;  // reused between samples
  int64_t already_cached_ = 0;
};

}  // namespace dflow::train
