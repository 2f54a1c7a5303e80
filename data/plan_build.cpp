// build_epoch_plan: options check, then the batching policy forms and orders the batches.
#include <fmt/format.h>

#include "data/batching_policy.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"

namespace dflow::data {
namespace {

const BatchingPolicy& batching_of(const PlanOptions& options) {
  return options.batching ? *options.batching : *token_budget_batching();
}

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
  if (options.grad_accum < 1) {
    throw DataError(fmt::format("train.grad_accum is {}; it must be at least 1", options.grad_accum));
  }
  if (options.world_size < 1) {
    throw DataError(fmt::format("world_size is {}; it must be at least 1", options.world_size));
  }
  if (options.epoch < 0) throw DataError(fmt::format("epoch is {}; epochs count from 0", options.epoch));
  batching_of(options).check(options);
}

}  // namespace

EpochPlan build_epoch_plan(std::span<const int32_t> lengths, uint64_t data_fingerprint, const PlanOptions& options) {
  check_plan_options(options);
  if (lengths.empty()) throw DataError("the dataset has no samples; check data.train and the dflow prepare report");
  return EpochPlan(options, data_fingerprint, batching_of(options).batches(lengths, options, data_fingerprint));
}

EpochPlan build_epoch_plan(const Dataset& dataset, const PlanOptions& options) {
  return build_epoch_plan(dataset.lengths(), dataset.fingerprint(), options);
}

}  // namespace dflow::data
