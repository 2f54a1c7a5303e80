#include "train/regenerate_features.hpp"

#include <ostream>
#include <stdexcept>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "data/data_error.hpp"
#include "drafter/drafter.hpp"
#include "train/feature_cache.hpp"

namespace dflow::train {

std::vector<int64_t> regenerate_feature_layers(const target::HFConfig& target, int64_t num_target_features,
                                               const std::vector<int64_t>& target_layer_ids) {
  drafter::DrafterOptions options;
  options.num_layers = config::DrafterConfig{}.num_layers;  // what num_target_features 0 falls back to in training
  options.num_target_features = num_target_features;
  options.target_layer_ids = target_layer_ids;
  // The layer choice does not depend on the mask token; a target without one
  // (a plain HF checkpoint) can still regenerate.
  options.mask_token_id = 0;
  return drafter::make_drafter_spec(target, options).target_layer_ids;
}

FeatureCapture::FeatureCapture(const target::TargetModel& target, FeatureCaptureOptions options)
    : options_(std::move(options)) {
  if (options_.layer_ids.empty()) throw ConfigError("regenerate --features: no feature layer ids");
  auto manifest = feature_manifest_for(options_.target_dir, target.config(), target.dtype(), options_.layer_ids);
  manifest.dtype = options_.dtype;
  manifest.source = "regenerate";
  // Regeneration writes before a dataset exists: samples are tied to their
  // lines by their tokens' hash.
  manifest.dataset_fingerprint = "";
  manifest.dataset_samples = 0;
  data::create_or_check_manifest(options_.dir, manifest);  // another target or layers: refused, naming them
  row_bytes_ = data::feature_row_bytes(options_.dtype, manifest.width());
  existing_ = std::make_unique<data::FeatureCacheReader>(options_.dir);
  writer_ = std::make_unique<data::FeatureCacheWriter>(options_.dir, "regen", options_.dtype, manifest.width());
}

void FeatureCapture::reserve(uint64_t positions) {
  const uint64_t bytes = positions * row_bytes_;
  if (options_.log) {
    *options_.log << "features: at most " << data::format_bytes(bytes) << " (" << positions << " positions x "
                  << row_bytes_ << " bytes, " << data::to_string(options_.dtype) << ") into "
                  << options_.dir.string() << "\n";
  }
  data::check_free_space(options_.dir, bytes, "regenerate --features");
}

namespace {
// The dataset stores int32 ids: the hash is over the same bytes.
uint64_t hash_of(const std::vector<int64_t>& input_ids) {
  const std::vector<int32_t> ids32(input_ids.begin(), input_ids.end());
  return data::tokens_hash(ids32);
}
}  // namespace

bool FeatureCapture::needs(int64_t sample_id, const std::vector<int64_t>& input_ids) {
  if (!existing_->contains(sample_id)) return true;
  if (existing_->get(sample_id, /*verify=*/false).tokens_hash != hash_of(input_ids))
    throw data::DataError("regenerate --features " + options_.dir.string() + ": " +
                          existing_->shard_of(sample_id).string() + " holds sample " + std::to_string(sample_id) +
                          " for other tokens than this run's line " + std::to_string(sample_id) +
                          " (an earlier run for another output); give an empty or new --features directory");
  ++already_cached_;
  return false;
}

void FeatureCapture::append(int64_t sample_id, const std::vector<int64_t>& input_ids, const torch::Tensor& features) {
  const int64_t rows = static_cast<int64_t>(input_ids.size());
  if (features.dim() != 2 || features.size(0) != rows)
    throw std::logic_error("regenerate --features: sample " + std::to_string(sample_id) + " has " +
                           std::to_string(rows) + " tokens but features of shape " + c10::str(features.sizes()));
  record_.clear();
  encode_feature_rows(features, options_.dtype, record_);
  writer_->append(sample_id, hash_of(input_ids), rows, record_);
}

void FeatureCapture::publish() {
  writer_->publish();
  if (options_.log) {
    *options_.log << "features: " << writer_->samples_written() << " samples, "
                  << data::format_bytes(writer_->bytes_written()) << " written to " << options_.dir.string();
    if (already_cached_ > 0) *options_.log << " (" << already_cached_ << " more already there for the same tokens)";
    *options_.log << "\n";
  }
}

}  // namespace dflow::train
