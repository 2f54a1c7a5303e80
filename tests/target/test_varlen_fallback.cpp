// Packed rows of a CUDA half/bfloat16 target take flash attention's
// variable-length kernel only where that kernel runs (an Ampere or newer GPU,
// a LibTorch built with it, a head_dim it takes); elsewhere the per-document
// path, which computes the same.
#include <doctest/doctest.h>

#include <string>

#include "target/documents.hpp"
#include "target/varlen_attention.hpp"

using namespace dflow::target;

TEST_CASE("Model.Packing.CudaHalfTargetWhereTheVarlenKernelCannotRunTakesThePerDocumentPath") {
  const torch::Tensor document_ids = torch::tensor({0, 0, 0, 1, 1, 2, 0, 0, 1, 1, 1, 1}, torch::kInt64).view({2, 6});
  if (torch::cuda::is_available()) {
    MESSAGE("skipped: a CUDA device is present, where the varlen kernel may run; tools/gpu_check.sh checks that machine");
    return;
  }
  // No GPU at all: the kernel cannot run, so the spans are kept.
  const DocumentAttention attention = prepare_document_attention(document_ids, torch::Device("cuda:0"), torch::kBFloat16);
  CHECK_FALSE(attention.varlen());
  CHECK(attention.spans.size() == 5);
  CHECK(attention.max_document_length == 4);
}

TEST_CASE("Model.Packing.VarlenKernelIsChosenOnlyWhereItsTrialRuns") {
  int trials = 0;
  auto runs = [&](torch::Device, torch::Dtype, int64_t) { ++trials; return std::string(); };
  auto fails = [&](torch::Device, torch::Dtype, int64_t) {
    ++trials;
    return std::string("FlashAttention only supports Ampere GPUs or newer.");
  };
  const torch::Device cuda("cuda:0");
  CHECK(decide_varlen_attention(cuda, torch::kBFloat16, 128, runs).use);
  CHECK(decide_varlen_attention(cuda, torch::kFloat16, 64, runs).use);
  CHECK(trials == 2);

  const VarlenDecision old_gpu = decide_varlen_attention(cuda, torch::kBFloat16, 128, fails);
  CHECK_FALSE(old_gpu.use);
  CHECK(old_gpu.reason.find("Ampere") != std::string::npos);  // the log line says why
  CHECK(trials == 3);

  // Never tried on the CPU or in float32: the per-document path.
  CHECK_FALSE(decide_varlen_attention(torch::kCPU, torch::kBFloat16, 128, runs).use);
  CHECK_FALSE(decide_varlen_attention(cuda, torch::kFloat32, 128, runs).use);
  CHECK(trials == 3);
}
