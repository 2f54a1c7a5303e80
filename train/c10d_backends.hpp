#pragma once
// The two c10d backends dflow uses, each built in its own translation unit
// (their headers need extra include paths and defines; see cmake/DflowC10d.cmake).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace dflow::train {

// Gloo over TCP, bound to `hostname`'s address (an empty hostname: this
// machine's name, falling back to loopback). Collectives wait at most `timeout`.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout, const std::string& hostname);

// NCCL between GPUs (this rank's current CUDA device). Throws when this build
// has no NCCL.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout);
bool nccl_built();

}  // namespace dflow::train
