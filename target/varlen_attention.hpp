// Whether packed rows may take flash attention's variable-length kernel. It
// runs only on CUDA in half/bfloat16, and there only on a GPU it supports
// (Ampere or newer), with a head_dim it takes, in a LibTorch built with it;
// elsewhere the per-document path (target/documents.hpp) computes the same.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>

namespace dflow::target {

struct VarlenDecision {
  bool use = false;
  std::string reason;  // why not, when not
};

// Runs the kernel once on a tiny input: "" when it ran, else its error.
using VarlenKernelTrial = std::function<std::string(torch::Device, torch::Dtype, int64_t head_dim)>;
std::string try_varlen_kernel(torch::Device device, torch::Dtype dtype, int64_t head_dim);

// CPU and float32/float64 never take the kernel (the trial is not run);
// CUDA half/bfloat16 take it where `trial` runs it.
VarlenDecision decide_varlen_attention(torch::Device device, torch::Dtype dtype, int64_t head_dim,
                                       const VarlenKernelTrial& trial);

// The decision with the real trial, made once per device, dtype and
// head_dim; a refusal on CUDA is logged once, with the kernel's reason.
bool use_varlen_attention(torch::Device device, torch::Dtype dtype, int64_t head_dim);

}  // namespace dflow::target
