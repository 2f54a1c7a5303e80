#pragma once
// The torch side of the feature cache (data/feature_cache.hpp holds the
// files): how a run's target is fingerprinted into a manifest, and how rows
// of features are encoded into and decoded from the storage dtypes.
//   float32      4 bytes a value: exactly the target's float32 features
//   bfloat16     2 bytes a value: round to nearest even
//   float8_e4m3  1 byte a value plus a float32 scale per row (position):
//                scale = max|row| / 448, values stored as row / scale
#include <torch/torch.h>

#include <filesystem>
#include <span>
#include <vector>

#include "data/feature_cache.hpp"
#include "target/hf_config.hpp"

namespace dflow::train {

// The manifest a cache of these features would have: fingerprints of the
// target directory (config.json, the safetensors headers and sampled
// weight bytes, tokenizer.json) and the layers. Dataset fields are left to
// the caller.
data::FeatureCacheManifest feature_manifest_for(const std::filesystem::path& target_dir, const target::HFConfig& config,
                                                torch::Dtype target_dtype, const std::vector<int64_t>& layer_ids);

// xxh64 over each *.safetensors file's name, size and header and 16 stripes
// of 64 KiB spread over its bytes (all of a file under 1 MiB): a retrained
// or converted checkpoint changes it; reading a 16 GB target takes
// milliseconds.
std::string weights_fingerprint(const std::filesystem::path& target_dir);

// Appends rows [T, W] (any floating dtype, any device) in `dtype`'s encoding
// to `out`: T * data::feature_row_bytes(dtype, W) bytes.
void encode_feature_rows(const torch::Tensor& rows, data::FeatureDtype dtype, std::vector<unsigned char>& out);

// Decodes a record of `rows` positions into `out` ([rows, W], CPU, any
// floating dtype; a view into a larger tensor is fine).
void decode_feature_rows(std::span<const unsigned char> record, int64_t rows, data::FeatureDtype dtype,
                         torch::Tensor out);

}  // namespace dflow::train
