#pragma once
// Several prepared directories (data.train is a list) seen as one sequence of
// samples with global ids: directory 0's samples first, then directory 1's...
// Read-only after open: sample() may be called from any number of threads.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/shard_set.hpp"

namespace dflow::data {

class Dataset {
 public:
  // Throws DataError for an empty list, a directory listed twice, or any
  // corrupt directory (see ShardSet::open).
  static Dataset open(const std::vector<std::string>& dirs, const OpenOptions& options = {});
  explicit Dataset(std::vector<ShardSet> sets);

  int64_t size() const { return static_cast<int64_t>(lengths_.size()); }
  std::span<const int32_t> lengths() const { return lengths_; }  // by global sample id
  SampleView sample(int64_t sample_id) const;
  void verify_sample(int64_t sample_id) const;

  // Hash of the directories' fingerprints in order: what the epoch plan keys on.
  uint64_t fingerprint() const { return fingerprint_; }
  // The largest vocab size any directory was checked against, if any was.
  std::optional<int64_t> vocab_size_hint() const;
  int64_t max_token_id() const;
  int64_t num_tokens() const;
  const std::vector<ShardSet>& sets() const { return sets_; }

 private:
  struct Local {
    size_t set;
    int64_t sample_id;
  };
  Local locate(int64_t sample_id) const;

  std::vector<ShardSet> sets_;
  std::vector<int64_t> first_sample_;  // global id of each set's first sample
  std::vector<int32_t> lengths_;
  uint64_t fingerprint_ = 0;
};

}  // namespace dflow::data
