// The counting allocator that measures what a pass holds on the CPU: every
// storage allocated while it is installed is counted until freed, those the
// convolution kernels take through the allocator's raw interface (Gated
// DeltaNet's depthwise conv) included.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "drafter/cpu_memory_counter.hpp"

using namespace dflow::drafter;

TEST_CASE("Model.CpuMemoryCounter.CountsAConvsStoragesUntilTheyAreFreed") {
  torch::set_num_threads(1);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const int64_t channels = 64, length = 512, kernel = 4;
  const torch::Tensor x = torch::randn({1, channels, length + kernel - 1}), weight = torch::randn({channels, 1, kernel});
  CpuMemoryCounter counter;
  torch::Tensor y = at::conv1d(x, weight, torch::Tensor(), at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1},
                               channels);  // depthwise, as Gated DeltaNet's
  const int64_t output_bytes = channels * length * 4;
  CHECK(y.nbytes() == static_cast<size_t>(output_bytes));
  CHECK(counter.current_bytes() >= output_bytes);
  CHECK(counter.peak_bytes() >= counter.current_bytes());
  const int64_t held = counter.current_bytes();
  y = torch::Tensor();
  CHECK(counter.current_bytes() == held - output_bytes);
}
