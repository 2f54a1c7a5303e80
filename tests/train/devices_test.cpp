// Copies between devices: a copy may skip blocking only where the device
// that reads the result orders it first.
#include <doctest/doctest.h>

#include "train/devices.hpp"

using dflow::train::copy_may_be_non_blocking;

TEST_CASE("Train.Devices.CopiesIntoHostMemoryBlock") {
  // A drafter on the CPU behind a CUDA target: a non-blocking copy of the
  // features lands in pinned memory after the drafter has read it.
  CHECK_FALSE(copy_may_be_non_blocking(torch::kCPU));
  // Onto a GPU the copy is queued on the stream its readers run on.
  CHECK(copy_may_be_non_blocking(torch::Device("cuda:0")));
  CHECK(copy_may_be_non_blocking(torch::Device("cuda:1")));
}
