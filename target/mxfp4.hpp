// MXFP4 (OCP microscaling FP4), as the published gpt-oss checkpoints store
// their experts: per 32 values one byte of scale, the exponent 2^(s - 127),
// and 16 bytes of e2m1 values, two per byte, the low nibble first.
// Dequantized exactly as transformers' convert_moe_packed_tensors does (the
// same table of the 16 e2m1 values, the same nibble order), on load.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace dflow::target {

// blocks [..., G, 16] uint8 and scales [..., G] uint8 -> [..., G * 32] in
// `dtype` on `device`: value 2i of a block is its byte i's low nibble, 2i + 1
// its high nibble, each times 2^(scale - 127) (computed in float32, exact but
// where 2^(scale - 127) leaves float32's range, as transformers' ldexp does).
// Unlike transformers it does not transpose the last two axes: the result is
// in the [out, in] orientation the checkpoint's rows have.
torch::Tensor mxfp4_dequantize(const torch::Tensor& blocks, const torch::Tensor& scales, torch::Device device,
                               torch::Dtype dtype);

// Bytes an [rows, inputs] matrix takes as MXFP4: per 32 inputs 16 bytes of
// values and one of scale (the blocks' and scales' nbytes together).
int64_t mxfp4_bytes(int64_t rows, int64_t inputs);

}  // namespace dflow::target
