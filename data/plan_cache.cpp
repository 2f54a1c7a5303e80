#include "data/plan_cache.hpp"

namespace dflow::data {

PlanCache::PlanCache(const Dataset& dataset, OptionsOf options_of, std::function<void(const EpochPlan&)> on_built)
    : dataset_(dataset), options_of_(std::move(options_of)), on_built_(std::move(on_built)) {}

std::shared_ptr<const EpochPlan> PlanCache::get(int epoch) const {
  std::lock_guard lock(mutex_);
  if (auto it = plans_.find(epoch); it != plans_.end()) return it->second;
  auto plan = std::make_shared<const EpochPlan>(build_epoch_plan(dataset_, options_of_(epoch)));
  if (on_built_) on_built_(*plan);
  plans_.emplace(epoch, plan);
  plans_.erase(plans_.begin(), plans_.lower_bound(epoch - 1));  // memory stays flat over long runs
  return plan;
}

}  // namespace dflow::data
