#include "data/dataset.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "data/checksum.hpp"
#include "data/data_error.hpp"

namespace dflow::data {

Dataset Dataset::open(const std::vector<std::string>& dirs, const OpenOptions& options) {
  if (dirs.empty()) throw DataError("data.train is empty; list at least one directory made by dflow prepare");
  std::set<std::filesystem::path> seen;
  std::vector<ShardSet> sets;
  for (const auto& dir : dirs) {
    std::error_code error;
    auto canonical = std::filesystem::weakly_canonical(dir, error);
    if (error) canonical = dir;
    if (!seen.insert(canonical).second) {
      throw DataError(fmt::format("data.train lists {} twice; each sample would be trained on twice per epoch", dir));
    }
    sets.push_back(ShardSet::open(dir, options));
  }
  return Dataset(std::move(sets));
}

Dataset::Dataset(std::vector<ShardSet> sets) : sets_(std::move(sets)) {
  fingerprint_ = hash_combine(0x64666c6f772d6473ULL /* "dflow-ds" */, sets_.size());
  for (const auto& set : sets_) {
    first_sample_.push_back(size());
    lengths_.insert(lengths_.end(), set.lengths().begin(), set.lengths().end());
    fingerprint_ = hash_combine(fingerprint_, set.fingerprint());
  }
}

Dataset::Local Dataset::locate(int64_t sample_id) const {
  if (sample_id < 0 || sample_id >= size()) {
    throw DataError(fmt::format("sample {} does not exist (the dataset holds {} samples); was the plan built for "
                                "another dataset?",
                                sample_id, size()));
  }
  const auto after = std::upper_bound(first_sample_.begin(), first_sample_.end(), sample_id);
  const auto set = static_cast<size_t>(after - first_sample_.begin()) - 1;
  return Local{set, sample_id - first_sample_[set]};
}

SampleView Dataset::sample(int64_t sample_id) const {
  const Local local = locate(sample_id);
  return sets_[local.set].sample(local.sample_id);
}

void Dataset::verify_sample(int64_t sample_id) const {
  const Local local = locate(sample_id);
  sets_[local.set].verify_sample(local.sample_id);
}

std::optional<int64_t> Dataset::vocab_size_hint() const {
  std::optional<int64_t> hint;
  for (const auto& set : sets_) {
    if (const auto v = set.vocab_size_hint()) hint = std::max(hint.value_or(0), *v);
  }
  return hint;
}

int64_t Dataset::max_token_id() const {
  int64_t max_id = -1;
  for (const auto& set : sets_) max_id = std::max(max_id, set.max_token_id());
  return max_id;
}

int64_t Dataset::num_tokens() const {
  int64_t tokens = 0;
  for (const auto& set : sets_) tokens += set.num_tokens();
  return tokens;
}

}  // namespace dflow::data
