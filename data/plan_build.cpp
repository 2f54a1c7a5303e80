// build_epoch_plan: options check, batch forming, ordering.
#include <fmt/format.h>

#include "data/batching.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/interleave.hpp"
#include "data/plan.hpp"
#include "data/seeded_rng.hpp"

namespace dflow::data {
namespace {

constexpr uint64_t kOrderStream = 0x300;

void check_plan_options(const PlanOptions& options) {
  const auto& buckets = options.buckets;
  if (buckets.empty()) throw DataError("data.buckets is empty; give at least one bucket length, e.g. [512]");
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b] < 1) {
      throw DataError(fmt::format("data.buckets[{}] is {}; bucket lengths must be positive", b, buckets[b]));
    }
    if (b > 0 && buckets[b] <= buckets[b - 1]) {
      throw DataError(fmt::format("data.buckets must be increasing: data.buckets[{}] = {} follows {}", b, buckets[b],
                                  buckets[b - 1]));
    }
  }
  if (options.mode == BatchMode::TokenBudget && options.tokens_per_batch < buckets.back()) {
    throw DataError(fmt::format("data.tokens_per_batch ({}) is smaller than the largest bucket ({}): one sample of "
                                "that bucket would not fit; raise data.tokens_per_batch or lower the largest bucket",
                                options.tokens_per_batch, buckets.back()));
  }
  if (options.mode == BatchMode::Pack) {
    if (options.max_length < 1) {
      throw DataError(fmt::format("data.max_length is {}; packing needs a positive row length", options.max_length));
    }
    if (options.tokens_per_batch < options.max_length) {
      throw DataError(fmt::format("data.tokens_per_batch ({}) is smaller than data.max_length ({}): one packed row "
                                  "would not fit; raise data.tokens_per_batch",
                                  options.tokens_per_batch, options.max_length));
    }
    if (options.pack_window < 1) {
      throw DataError(fmt::format("pack_window (pad_bucket.pack params) is {}; it must be at least 1",
                                  options.pack_window));
    }
  }
  if (options.mode == BatchMode::FixedBatch && options.batch_size < 1) {
    throw DataError(fmt::format("batch_size (pad_bucket.fixed_batch params) is {}; it must be at least 1", options.batch_size));
  }
  if (options.grad_accum < 1) {
    throw DataError(fmt::format("train.grad_accum is {}; it must be at least 1", options.grad_accum));
  }
  if (options.world_size < 1) {
    throw DataError(fmt::format("world_size is {}; it must be at least 1", options.world_size));
  }
  if (options.epoch < 0) throw DataError(fmt::format("epoch is {}; epochs count from 0", options.epoch));
}

}  // namespace

BatchMode parse_batch_mode(std::string_view text) {
  if (text == "token_budget") return BatchMode::TokenBudget;
  if (text == "fixed_batch") return BatchMode::FixedBatch;
  if (text == "pack") return BatchMode::Pack;
  throw DataError(fmt::format("batch mode '{}' is not known; use 'token_budget', 'fixed_batch' or 'pack'", text));
}

EpochPlan build_epoch_plan(std::span<const int32_t> lengths, uint64_t data_fingerprint, const PlanOptions& options) {
  check_plan_options(options);
  if (lengths.empty()) throw DataError("the dataset has no samples; check data.train and the dflow prepare report");
  if (options.mode == BatchMode::FixedBatch) {
    // Peers' baseline: the shuffle already mixes lengths, so no interleave.
    return EpochPlan(options, data_fingerprint, fixed_size_batches(lengths, options, data_fingerprint));
  }
  if (options.mode == BatchMode::Pack) {
    // Rows are shuffled already and mix lengths; no buckets to interleave.
    return EpochPlan(options, data_fingerprint, packed_batches(lengths, options, data_fingerprint));
  }
  auto grouped = token_budget_batches(lengths, options, data_fingerprint);
  const auto order =
      interleave_buckets(grouped, derive_seed(options.seed, options.epoch, data_fingerprint, kOrderStream));
  std::vector<PlannedBatch> ordered;
  ordered.reserve(grouped.size());
  for (const size_t i : order) ordered.push_back(std::move(grouped[i]));
  return EpochPlan(options, data_fingerprint, std::move(ordered));
}

EpochPlan build_epoch_plan(const Dataset& dataset, const PlanOptions& options) {
  return build_epoch_plan(dataset.lengths(), dataset.fingerprint(), options);
}

}  // namespace dflow::data
