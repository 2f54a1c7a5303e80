#include "data/batching_policy.hpp"

#include <fmt/format.h>

#include "data/batching.hpp"
#include "data/data_error.hpp"
#include "data/interleave.hpp"
#include "data/seeded_rng.hpp"

namespace dflow::data {
namespace {

constexpr uint64_t kOrderStream = 0x300;

class TokenBudget final : public BatchingPolicy {
 public:
  std::string name() const override { return "token_budget"; }
  bool one_bucket_per_batch() const override { return true; }
  void check(const PlanOptions& options) const override {
    if (options.tokens_per_batch < options.buckets.back())
      throw DataError(fmt::format("data.tokens_per_batch ({}) is smaller than the largest bucket ({}): one sample of "
                                  "that bucket would not fit; raise data.tokens_per_batch or lower the largest bucket",
                                  options.tokens_per_batch, options.buckets.back()));
  }
  std::vector<PlannedBatch> batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                    uint64_t data_fingerprint) const override {
    auto grouped = token_budget_batches(lengths, options, data_fingerprint);
    const auto order =
        interleave_buckets(grouped, derive_seed(options.seed, options.epoch, data_fingerprint, kOrderStream));
    std::vector<PlannedBatch> ordered;
    ordered.reserve(grouped.size());
    for (const size_t i : order) ordered.push_back(std::move(grouped[i]));
    return ordered;
  }
};

class FixedSize final : public BatchingPolicy {
 public:
  explicit FixedSize(int batch_size) : batch_size_(batch_size) {}
  std::string name() const override { return "fixed_batch"; }
  std::string params_text() const override { return fmt::format("{{batch_size: {}}}", batch_size_); }
  void check(const PlanOptions&) const override {
    if (batch_size_ < 1)
      throw DataError(fmt::format("batch_size (pad_bucket.fixed_batch params) is {}; it must be at least 1", batch_size_));
  }
  // The shuffle already mixes lengths: no interleave (the peers' baseline).
  std::vector<PlannedBatch> batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                    uint64_t data_fingerprint) const override {
    return fixed_size_batches(lengths, options, data_fingerprint, batch_size_);
  }

 private:
  int batch_size_;
};

class Packed final : public BatchingPolicy {
 public:
  explicit Packed(int pack_window) : pack_window_(pack_window) {}
  std::string name() const override { return "pack"; }
  std::string params_text() const override { return fmt::format("{{pack_window: {}}}", pack_window_); }
  void check(const PlanOptions& options) const override {
    if (options.max_length < 1)
      throw DataError(fmt::format("data.max_length is {}; packing needs a positive row length", options.max_length));
    if (options.tokens_per_batch < options.max_length)
      throw DataError(fmt::format("data.tokens_per_batch ({}) is smaller than data.max_length ({}): one packed row "
                                  "would not fit; raise data.tokens_per_batch",
                                  options.tokens_per_batch, options.max_length));
    if (pack_window_ < 1)
      throw DataError(fmt::format("pack_window (pad_bucket.pack params) is {}; it must be at least 1", pack_window_));
  }
  // Rows are shuffled already and mix lengths: no buckets to interleave.
  std::vector<PlannedBatch> batches(std::span<const int32_t> lengths, const PlanOptions& options,
                                    uint64_t data_fingerprint) const override {
    return packed_batches(lengths, options, data_fingerprint, pack_window_);
  }

 private:
  int pack_window_;
};

}  // namespace

std::shared_ptr<const BatchingPolicy> token_budget_batching() {
  static const auto policy = std::make_shared<const TokenBudget>();
  return policy;
}
std::shared_ptr<const BatchingPolicy> fixed_size_batching(int batch_size) {
  return std::make_shared<const FixedSize>(batch_size);
}
std::shared_ptr<const BatchingPolicy> packed_batching(int pack_window) {
  return std::make_shared<const Packed>(pack_window);
}

}  // namespace dflow::data
