#pragma once
// Data parallel over c10d: the rendezvous store, the process groups and the
// few collectives a training step needs. No graph here: nodes call these
// while they hold the model token, so every rank issues them in the same order.
//
// Process groups (collectives on one group must be issued in the same order
// on every rank, so each caller that runs concurrently gets its own):
//   gradients: NCCL when the drafter is on CUDA, else Gloo;
//   host:      Gloo, the step's float64 sums and the start-up handshake;
//   control:   Gloo, checkpoint agreement (the checkpoint node runs beside training).
// A failed or timed-out collective is turned into an error that names the
// lost rank: each rank keeps a heartbeat counter in the store and, when it
// fails, leaves its reason there. A rank that is alive but stuck (its
// heartbeat goes on, its training does not) is named too: the heartbeat
// thread also publishes how many collectives the rank has entered, so the
// ones that never reached the collective that timed out stand out.
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "train/launch_env.hpp"

namespace c10d {
class Backend;
class Work;
class Store;
}  // namespace c10d

namespace dflow::train {

struct DistributedOptions {
  std::string backend = "auto";  // auto | gloo | nccl
  std::chrono::milliseconds timeout{300000};
  int64_t bucket_bytes = int64_t{25} << 20;
  torch::Device device{torch::kCPU};  // the drafter's: where gradients live
};

class Distributed {
 public:
  // Rendezvous (rank 0 serves the store unless torchrun's agent does) and
  // connects the process groups; throws naming MASTER_ADDR:MASTER_PORT when
  // the others do not arrive within the timeout.
  Distributed(const LaunchEnv& env, const DistributedOptions& options);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const LaunchEnv& env() const { return env_; }
  const std::string& backend_name() const { return backend_name_; }

  // Sums each tensor's gradient over the ranks, in flat buckets of about
  // bucket_bytes (an undefined gradient counts as zeros where another rank
  // has one, and stays undefined where no rank has).
  void allreduce_gradients(const std::vector<torch::Tensor>& parameters, const std::string& what);
  // Sums `values` elementwise over the ranks (float64, exact for counts < 2^53).
  void allreduce_sum(std::vector<double>& values, const std::string& what);
  // True when every rank passes true (the control group: for the checkpoint node).
  bool all_agree(bool ok, const std::string& what);
  // Copies rank 0's tensors to every rank.
  void broadcast(const std::vector<torch::Tensor>& tensors, const std::string& what);
  // Throws, saying which ranks differ, unless every rank passes the same value.
  void require_same(uint64_t value, const std::string& what);
  // All ranks reached the end.
  void barrier(const std::string& what);

  // Leaves this rank's failure in the store, so that the others can name it.
  void mark_failed(const std::string& reason) noexcept;
  void mark_done() noexcept;

 private:
  // Collectives issued in one order on every rank: the training thread's
  // (gradients and host groups, under the model token) and the checkpoint
  // node's (control group), which runs beside it.
  enum Sequence : size_t { kTraining = 0, kControl = 1 };
  struct Arrival {
    int64_t count = 0;  // collectives of the sequence entered so far
    std::string what;   // the last one
  };
  void arrive(Sequence sequence, const std::string& what);
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what, Sequence sequence);
  [[noreturn]] void fail(const std::string& what, const std::string& cause, Sequence sequence);
  std::string diagnose(Sequence sequence);
  std::string stragglers(Sequence sequence);
  void heartbeat_loop();
  std::string key(const std::string& name, int rank) const;

  LaunchEnv env_;
  DistributedOptions options_;
  std::string backend_name_;
  c10::intrusive_ptr<c10d::Store> store_;      // prefixed per attempt
  c10::intrusive_ptr<c10d::Store> hb_store_;   // own connection for the heartbeat thread
  c10::intrusive_ptr<c10d::Backend> gradients_, host_, control_;
  std::thread heartbeat_;
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_cv_;
  bool stopping_ = false;
  std::array<Arrival, 2> arrivals_;  // guarded by heartbeat_mutex_
  bool arrivals_changed_ = false;
};

}  // namespace dflow::train
