#include "train/devices.hpp"

#include <ATen/DeviceAccelerator.h>
#include <torch/version.h>

#include <fstream>
#include <limits>
#include <string>

#include <stdexcept>

namespace dflow::train {

torch::Device resolve_device(const std::string& text, int local_rank) {
  torch::Device device(text);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw std::runtime_error("device '" + text + "' is configured but CUDA is not available on this machine");
  if (device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  return device;
}

torch::Dtype parse_dtype(const std::string& text) { return text == "bfloat16" ? torch::kBFloat16 : torch::kFloat32; }

bool copy_may_be_non_blocking(torch::Device destination) { return destination.is_cuda(); }

double available_memory_bytes(torch::Device device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  if (device.is_cuda()) return static_cast<double>(at::accelerator::getMemoryInfo(device.index()).first);
#else
  if (device.is_cuda()) return 0;  // no device-generic memory query before LibTorch 2.9
#endif
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") return kib * 1024.0;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

}  // namespace dflow::train
