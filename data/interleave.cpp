#include "data/interleave.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "data/seeded_rng.hpp"

namespace dflow::data {
namespace {

struct Slot {
  double position;  // in [0, 1): where in the epoch the batch runs
  int bucket_index;
  size_t batch;
  bool operator<(const Slot& other) const {
    // A total order, so that sorting is deterministic on every standard library.
    return std::tie(position, bucket_index, batch) < std::tie(other.position, other.bucket_index, other.batch);
  }
};

}  // namespace

std::vector<size_t> interleave_buckets(std::span<const PlannedBatch> batches, uint64_t seed) {
  std::map<int, std::vector<size_t>> batches_of_bucket;
  for (size_t i = 0; i < batches.size(); ++i) batches_of_bucket[batches[i].bucket_index].push_back(i);

  SeededRng rng(seed);
  std::vector<Slot> slots;
  slots.reserve(batches.size());
  for (auto& [bucket_index, members] : batches_of_bucket) {
    // Shuffled so that a bucket's short last batch is not always late in the epoch.
    rng.shuffle(std::span<size_t>(members));
    const auto count = static_cast<double>(members.size());
    for (size_t k = 0; k < members.size(); ++k) {
      slots.push_back(Slot{(static_cast<double>(k) + rng.unit()) / count, bucket_index, members[k]});
    }
  }
  std::sort(slots.begin(), slots.end());
  std::vector<size_t> order;
  order.reserve(slots.size());
  for (const Slot& slot : slots) order.push_back(slot.batch);
  return order;
}

}  // namespace dflow::data
