// The only file that sees c10d's ProcessGroupNCCL.hpp; built with NCCL when
// the wheel is a CUDA build and ships nccl.h (cmake/DflowC10d.cmake).
#include "train/c10d_backends.hpp"

#include <stdexcept>

#if defined(DFLOW_HAVE_NCCL)
#define USE_C10D_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace dflow::train {

#if defined(DFLOW_HAVE_NCCL)
bool nccl_built() { return true; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#else
bool nccl_built() { return false; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                    std::chrono::milliseconds) {
  throw std::runtime_error("distributed.backend: this dflow build has no NCCL (LibTorch without CUDA); use gloo");
}
#endif

}  // namespace dflow::train
