// FP8 checkpoints (config.json quantization_config.quant_method "fp8", as
// Qwen3-8B-FP8 and Qwen3.5/3.6-FP8 ship, and transformers' FineGrainedFP8
// writes): each quantized linear weight `<w>.weight` is stored float8 (E4M3,
// or E5M2) beside `<w>.weight_scale_inv` (float32: one value, one per output
// row, or one per block of quantization_config.weight_block_size [rows,
// columns]); the embedding, LM head and norms are stored as they were. A
// loaded target dequantizes them: weight = float8 value x its block's scale,
// in float32, then converted to the target's dtype as any other weight.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/safetensors.hpp"

namespace dflow::target {

// quantization_config.weight_block_size as {rows, columns}, or empty when
// absent (the scale's shape then says: one value, or one per row). Throws
// naming the directory for a malformed one.
std::vector<int64_t> fp8_block_size(const nlohmann::json& quantization_config, const std::filesystem::path& dir);

// How many of `tensors` are float8 (read with load_checkpoint_dir(dir,
// /*with_float8=*/true)).
int64_t count_fp8_weights(const formats::TensorMap& tensors);

// The float8 tensor `name` of `tensors` dequantized to float32 with its scale
// (`name`_scale_inv, or `name`_scale). Throws naming the directory and the
// tensor for a float8 weight without a scale, and for a scale whose shape
// does not tile its weight.
torch::Tensor dequantize_fp8_weight(const formats::TensorMap& tensors, const std::string& name,
                                    const std::vector<int64_t>& block, const std::filesystem::path& dir);

// Whether `t` is stored in one of torch's float8 dtypes (E4M3, E5M2).
bool is_float8(const torch::Tensor& t);

// One weight [out, in] (float8) times its scale: a single value, one per row
// ([out] or [out, 1]), or one per block ([ceil(out / rows), ceil(in / cols)],
// `block` = {rows, cols}; empty: derived from the scale's shape).
torch::Tensor dequantize_fp8(const torch::Tensor& weight, const torch::Tensor& scale, const std::vector<int64_t>& block);

}  // namespace dflow::target
