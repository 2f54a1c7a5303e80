// Bytes that LibTorch's CPU tensors hold, counted where they are allocated:
// while a CpuMemoryCounter is installed (one at a time), every CPU tensor
// storage (and raw buffer: a bfloat16 matrix product's packing) allocated
// through the CPU allocator is counted until it is freed,
// and the peak is kept. For measuring what a pass holds (the drafter's
// activations) on a machine without device memory statistics; storages
// allocated before installing are not counted, even when freed later.
#pragma once

#include <atomic>
#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace dflow::drafter {

class CpuMemoryCounter {
 public:
  CpuMemoryCounter();   // installs itself as the CPU allocator
  ~CpuMemoryCounter();  // puts the previous one back
  CpuMemoryCounter(const CpuMemoryCounter&) = delete;
  CpuMemoryCounter& operator=(const CpuMemoryCounter&) = delete;

  int64_t current_bytes() const;
  int64_t peak_bytes() const;
  // The peak from now on starts at the current bytes.
  void reset_peak();
};

}  // namespace dflow::drafter
