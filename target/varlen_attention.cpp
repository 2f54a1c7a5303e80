#include "target/varlen_attention.hpp"

#include <map>
#include <mutex>
#include <tuple>

#include "config/log.hpp"

namespace dflow::target {

std::string try_varlen_kernel(torch::Device device, torch::Dtype dtype, int64_t head_dim) {
  try {
    // Two one-token documents of one head.
    const torch::Tensor x = torch::zeros({2, 1, head_dim}, torch::TensorOptions().device(device).dtype(dtype));
    const torch::Tensor starts = torch::tensor({0, 1, 2}, torch::kInt32).to(device);
    at::_flash_attention_forward(x, x, x, starts, starts, 1, 1, /*dropout_p=*/0.0, /*is_causal=*/true,
                                 /*return_debug_mask=*/false, /*scale=*/1.0);
    return "";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string first_line = what.substr(0, what.find('\n'));
    return first_line.empty() ? "the kernel failed" : first_line;
  }
}

VarlenDecision decide_varlen_attention(torch::Device device, torch::Dtype dtype, int64_t head_dim,
                                       const VarlenKernelTrial& trial) {
  if (!device.is_cuda()) return {false, "not a CUDA device"};
  if (dtype != torch::kBFloat16 && dtype != torch::kFloat16) return {false, "the kernel takes half and bfloat16 only"};
  std::string failure = trial(device, dtype, head_dim);
  if (!failure.empty()) return {false, std::move(failure)};
  return {true, ""};
}

bool use_varlen_attention(torch::Device device, torch::Dtype dtype, int64_t head_dim) {
  if (!device.is_cuda() || (dtype != torch::kBFloat16 && dtype != torch::kFloat16)) return false;
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int64_t>, bool> decided;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(static_cast<int>(device.index()), static_cast<int>(dtype), head_dim);
  if (const auto it = decided.find(key); it != decided.end()) return it->second;
  const VarlenDecision decision = decide_varlen_attention(device, dtype, head_dim, try_varlen_kernel);
  if (!decision.use) {
    log::warn("model", log::str("packed rows on ", device.str(), " in ", c10::toString(dtype), ", head_dim ", head_dim,
                                ": flash attention's variable-length kernel cannot run here (", decision.reason,
                                "); attending one document at a time instead"));
  }
  decided.emplace(key, decision.use);
  return decision.use;
}

}  // namespace dflow::target
