#include "target/mxfp4.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace dflow::target {

namespace {

// The e2m1 values by nibble (transformers' FP4_VALUES): sign bit 3.
const float kFp4Values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

struct DequantTables {
  torch::Tensor byte_values;   // [256, 2] float32: (low nibble's, high nibble's) value of every byte
  torch::Tensor scale_values;  // [256] float32: 2^(s - 127) by scale byte
};

// The tables on `device`, made once per device: resident experts dequantize
// per expert per forward, and two host-to-device copies each time would be
// thousands per forward on a GPU. Shared by the target replicas' threads.
const DequantTables& tables_on(torch::Device device) {
  static std::mutex mutex;
  // Never destroyed: a CUDA tensor freed after the driver shut down at exit crashes.
  static auto* const by_device = new std::map<std::pair<int, int>, DequantTables>();
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(device.type()), static_cast<int>(device.index()));
  auto it = by_device->find(key);
  if (it == by_device->end()) {
    const torch::Tensor nibble_values = torch::from_blob(const_cast<float*>(kFp4Values), {16}, torch::kFloat32);
    DequantTables tables;
    tables.byte_values = torch::stack({nibble_values.repeat({16}), nibble_values.repeat_interleave(16)}, -1).to(device);
    // As transformers' ldexp computes the factor (inf for 255, where float32 ends).
    tables.scale_values =
        torch::ldexp(torch::ones({256}, torch::kFloat32), torch::arange(256, torch::kInt32) - 127).to(device);
    it = by_device->emplace(key, std::move(tables)).first;
  }
  return it->second;
}

}  // namespace

torch::Tensor mxfp4_dequantize(const torch::Tensor& blocks, const torch::Tensor& scales, torch::Device device,
                               torch::Dtype dtype) {
  if (blocks.scalar_type() != torch::kUInt8 || scales.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument("mxfp4: blocks and scales must be uint8, got " +
                                std::string(c10::toString(blocks.scalar_type())) + " and " +
                                std::string(c10::toString(scales.scalar_type())));
  }
  if (blocks.dim() < 2 || blocks.size(-1) != 16 || blocks.sizes().slice(0, blocks.dim() - 1) != scales.sizes()) {
    throw std::invalid_argument("mxfp4: blocks " + c10::str(blocks.sizes()) + " and scales " +
                                c10::str(scales.sizes()) + " are not [..., G, 16] and [..., G]");
  }
  std::vector<int64_t> out_shape = scales.sizes().vec();
  out_shape.back() *= 32;
  torch::Tensor out = torch::empty(out_shape, torch::TensorOptions().device(device).dtype(dtype));
  if (out.numel() == 0) return out;
  const DequantTables& tables = tables_on(device);
  const torch::Tensor& byte_values = tables.byte_values;
  const torch::Tensor& scale_values = tables.scale_values;
  // A slice of the leading axis at a time (one expert, for the experts'
  // [E, rows, G, 16]), so that the float32 and index temporaries stay small;
  // one expert's [rows, G, 16] in one go.
  const bool stacked = blocks.dim() > 3;
  const int64_t slices = stacked ? blocks.size(0) : 1;
  const torch::Tensor all_blocks = stacked ? blocks : blocks.unsqueeze(0);
  const torch::Tensor all_scales = stacked ? scales : scales.unsqueeze(0);
  const torch::Tensor all_out = stacked ? out : out.unsqueeze(0);
  for (int64_t i = 0; i < slices; ++i) {
    // index_select and an in-place product: the same float32 values as an
    // advanced index and a fresh product, without their extra passes (this
    // runs per expert per forward when the experts stay resident).
    const torch::Tensor bytes = all_blocks[i].to(device);  // [..., G, 16]
    std::vector<int64_t> value_shape = bytes.sizes().vec();
    value_shape.back() = 32;
    torch::Tensor values = byte_values.index_select(0, bytes.reshape({-1}).to(torch::kInt64)).view(value_shape);
    const torch::Tensor factors =
        scale_values.index_select(0, all_scales[i].to(device).reshape({-1}).to(torch::kInt64));
    values.mul_(factors.view(all_scales[i].sizes()).unsqueeze(-1));  // [..., G, 32]
    all_out[i].copy_(values.flatten(-2));
  }
  return out;
}

int64_t mxfp4_bytes(int64_t rows, int64_t inputs) { return rows * (inputs / 32) * (16 + 1); }

}  // namespace dflow::target
