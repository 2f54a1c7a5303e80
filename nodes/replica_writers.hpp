#pragma once
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "data/feature_cache.hpp"

namespace dflow::nodes {

// The replicas' writers (fill: true), one slot each: a replica that meets a
// sample another replica appended but has not published asks that writer to
// publish, instead of computing and writing the sample a second time. A
// thread holds one slot's lock at a time (no lock order to keep).
class ReplicaWriters {
 public:
  explicit ReplicaWriters(int replicas) : slots_(static_cast<size_t>(std::max(replicas, 1))) {}

  void attach(int replica, data::FeatureCacheWriter* writer) {
    auto& slot = slots_.at(static_cast<size_t>(replica));
    std::lock_guard lock(slot.mutex);
    slot.writer = writer;
  }
  // Runs `f(writer)` under the replica's lock: its appends and publishes.
  template <class F>
  decltype(auto) with(int replica, F&& f) {
    auto& slot = slots_.at(static_cast<size_t>(replica));
    std::lock_guard lock(slot.mutex);
    return f(*slot.writer);
  }
  // Publishes each writer's open shard that holds one of `ids`.
  void publish_holding(std::span<const int64_t> ids) {
    for (auto& slot : slots_) {
      std::lock_guard lock(slot.mutex);
      if (slot.writer && std::any_of(ids.begin(), ids.end(), [&](int64_t id) { return slot.writer->unpublished(id); }))
        slot.writer->publish();
    }
  }

 private:
  struct Slot {
    std::mutex mutex;
    data::FeatureCacheWriter* writer = nullptr;
  };
  std::vector<Slot> slots_;  // sized once: the mutexes never move
};

}  // namespace dflow::nodes
