#include "target/fp8.hpp"

#include <stdexcept>

namespace dflow::target {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool is_float8(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat8_e4m3fn || t.scalar_type() == torch::kFloat8_e5m2;
}

torch::Tensor dequantize_fp8(const torch::Tensor& weight, const torch::Tensor& scale, const std::vector<int64_t>& block) {
  const torch::Tensor w = weight.to(torch::kFloat32);
  torch::Tensor s = scale.to(torch::kFloat32);
  if (s.numel() == 1) return w * s.reshape({});
  if (w.dim() != 2) {
    throw std::invalid_argument("a " + std::to_string(w.dim()) + "-D weight takes one scale, not " +
                                c10::str(s.sizes()));
  }
  const int64_t out = w.size(0), in = w.size(1);
  if (s.dim() == 1) s = s.unsqueeze(1);
  if (s.dim() != 2) throw std::invalid_argument("scale of shape " + c10::str(s.sizes()) + " for weight " + c10::str(w.sizes()));
  const int64_t rows = block.size() == 2 ? block[0] : ceil_div(out, s.size(0));
  const int64_t cols = block.size() == 2 ? block[1] : ceil_div(in, s.size(1));
  if (rows < 1 || cols < 1 || s.size(0) != ceil_div(out, rows) || s.size(1) != ceil_div(in, cols)) {
    throw std::invalid_argument("scale of shape " + c10::str(s.sizes()) + " does not tile weight " +
                                c10::str(w.sizes()) + " in blocks of " + std::to_string(rows) + "x" +
                                std::to_string(cols));
  }
  const torch::Tensor expanded =
      s.repeat_interleave(rows, 0).slice(0, 0, out).repeat_interleave(cols, 1).slice(1, 0, in);
  return w * expanded;
}

std::vector<int64_t> fp8_block_size(const nlohmann::json& quantization_config, const std::filesystem::path& dir) {
  if (!quantization_config.contains("weight_block_size") || quantization_config["weight_block_size"].is_null()) return {};
  const auto& b = quantization_config["weight_block_size"];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1) {
    throw std::runtime_error("target checkpoint '" + dir.string() + "': config.json quantization_config." +
                             "weight_block_size " + b.dump() + " is not two positive integers [rows, columns]");
  }
  return {b[0].get<int64_t>(), b[1].get<int64_t>()};
}

int64_t count_fp8_weights(const formats::TensorMap& tensors) {
  int64_t n = 0;
  for (const auto& [name, tensor] : tensors) n += is_float8(tensor);
  return n;
}

torch::Tensor dequantize_fp8_weight(const formats::TensorMap& tensors, const std::string& name,
                                    const std::vector<int64_t>& block, const std::filesystem::path& dir) {
  const torch::Tensor& weight = tensors.at(name);
  for (const char* suffix : {"_scale_inv", "_scale"}) {
    const auto scale = tensors.find(name + suffix);
    if (scale == tensors.end()) continue;
    try {
      return dequantize_fp8(weight, scale->second, block);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("target checkpoint '" + dir.string() + "': tensor '" + scale->first + "': " + e.what());
    }
  }
  throw std::runtime_error("target checkpoint '" + dir.string() + "': tensor '" + name + "' is stored as " +
                           c10::toString(weight.scalar_type()) + " without a scale ('" + name +
                           "_scale_inv'): dflow cannot dequantize it");
}

}  // namespace dflow::target
