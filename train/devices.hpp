#pragma once
// Device and dtype names from the config, read the same way everywhere
// (training, the launcher's process groups, replay).
#include <torch/torch.h>

#include <string>

namespace dflow::train {

// "cpu", "cuda", "cuda:N". A bare "cuda" is this process's own GPU,
// cuda:LOCAL_RANK (cuda:0 for a single process). Throws when a CUDA device is
// configured on a machine without a usable GPU, naming the device.
torch::Device resolve_device(const std::string& text, int local_rank = 0);

// "float32" | "bfloat16" (validated by the config).
torch::Dtype parse_dtype(const std::string& text);

// Whether a copy onto `destination` may be non_blocking. Onto a GPU it is
// queued on the stream that the tensor's readers run on; into host memory
// (a drafter on the CPU behind a CUDA target) it would land in pinned memory
// whenever the GPU gets to it, after the host had read the tensor.
bool copy_may_be_non_blocking(torch::Device destination);

// Memory a new allocation on `device` can still get, in bytes: the
// machine's available RAM (MemAvailable) for the CPU, the device's free
// memory for a GPU. 0 when it cannot be read.
double available_memory_bytes(torch::Device device);

}  // namespace dflow::train
