// Internal to model/: the target loader's view of a checkpoint's tensors,
// and each mixture-of-experts family's expert loading
// (target/target_load_qwen3_moe.cpp, target/target_load_gpt_oss.cpp).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "target/fp8.hpp"
#include "target/hf_config.hpp"
#include "target/gated_deltanet.hpp"
#include "target/moe.hpp"
#include "formats/safetensors.hpp"

namespace dflow::target {

// Tensors by name, each checked for presence and for the shape config.json
// implies, converted to the target's device and dtype on the way out.
class WeightSource {
 public:
  WeightSource(formats::TensorMap tensors, std::filesystem::path dir, torch::Device device, torch::Dtype dtype)
      : tensors_(std::move(tensors)), dir_(std::move(dir)), device_(device), dtype_(dtype) {}

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  torch::Tensor take(const std::string& name, const std::vector<int64_t>& expected_shape) const {
    const torch::Tensor& stored = take_checked(name, expected_shape);
    // An FP8 checkpoint's weight, dequantized as it is taken: one float32
    // weight at a time, never the whole model's.
    if (fp8_ && is_float8(stored)) return dequantize_fp8_weight(tensors_, name, fp8_block_, dir_).to(device_, dtype_).contiguous();
    return stored.to(device_, dtype_).contiguous();
  }

  // Float8 tensors (an FP8 checkpoint's, read with_float8) are dequantized
  // with their scales in blocks of `block` (target/fp8.hpp) when taken.
  void dequantize_fp8(std::vector<int64_t> block) {
    fp8_ = true;
    fp8_block_ = std::move(block);
  }

  // Presence and shape checked; the tensor as stored.
  const torch::Tensor& take_checked(const std::string& name, const std::vector<int64_t>& expected_shape) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      throw std::runtime_error("target checkpoint '" + dir_.string() + "' lacks tensor '" + name +
                               "' (is this a supported HF layout?)");
    }
    if (it->second.sizes().vec() != expected_shape) {
      throw std::runtime_error("target checkpoint '" + dir_.string() + "': tensor '" + name + "' has shape " +
                               c10::str(it->second.sizes()) + " but config.json implies " +
                               c10::str(c10::IntArrayRef(expected_shape)));
    }
    return it->second;
  }

  // The tensor as the checkpoint stores it (its own dtype, on the CPU),
  // checked for presence, shape and dtype: MXFP4's uint8 blocks and scales,
  // which a conversion to the target's dtype would destroy.
  const torch::Tensor& raw(const std::string& name, const std::vector<int64_t>& expected_shape,
                           torch::Dtype expected_dtype) const {
    const torch::Tensor& tensor = take_checked(name, expected_shape);
    if (tensor.scalar_type() != expected_dtype) {
      throw std::runtime_error("target checkpoint '" + dir_.string() + "': tensor '" + name + "' is " +
                               std::string(c10::toString(tensor.scalar_type())) + ", expected " +
                               std::string(c10::toString(expected_dtype)));
    }
    return tensor;
  }

  torch::Device device() const { return device_; }
  torch::Dtype dtype() const { return dtype_; }

  torch::Tensor take_optional(const std::string& name, const std::vector<int64_t>& expected_shape,
                              bool required) const {
    if (!required && !has(name)) return {};
    return take(name, expected_shape);
  }

 private:
  formats::TensorMap tensors_;
  std::filesystem::path dir_;
  torch::Device device_;
  torch::Dtype dtype_;
  bool fp8_ = false;
  std::vector<int64_t> fp8_block_;
};

// One layer's routed experts; `prefix` is "model.layers.<i>.mlp.".
ExpertWeights load_qwen3_moe_experts(const WeightSource& source, const std::string& prefix, const HFConfig& config);
// gpt-oss: MXFP4 projections kept packed or dequantized as `mxfp4` says.
ExpertWeights load_gpt_oss_experts(const WeightSource& source, const std::string& prefix, const HFConfig& config,
                                   Mxfp4Experts mxfp4);
// A Qwen3.5 linear_attention layer's Gated DeltaNet; `prefix` is
// "<root>layers.<i>.linear_attn." (target/target_load_qwen3_5.cpp).
LinearAttentionWeights load_linear_attention(const WeightSource& source, const std::string& prefix,
                                             const HFConfig& config);
// Refuses a layer whose tensors are another kind's than layer_types says
// (self_attn.* on a linear_attention layer, linear_attn.* on a full one),
// naming the layer, its layer_types entry and the tensor found.
void check_layer_kind(const WeightSource& source, const HFConfig& config, int64_t layer, const std::string& prefix);
// The router and activation config.moe describes (default options when dense).
ExpertOptions expert_options(const HFConfig& config);

}  // namespace dflow::target
