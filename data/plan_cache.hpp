#pragma once
// Epoch plans of one run, built on first use and shared by every thread that
// asks (the loader walks ahead while the step all-reduce looks up the step's
// batches). Thread-safe; a plan handed out stays valid as long as its holder
// keeps it, while the cache itself keeps only the newest two epochs.
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "data/plan.hpp"

namespace dflow::data {

class PlanCache {
 public:
  using OptionsOf = std::function<PlanOptions(int epoch)>;
  // `log_summary` (optional) receives each plan's summary line once, when it is built.
  PlanCache(const Dataset& dataset, OptionsOf options_of, std::function<void(const EpochPlan&)> on_built = {});

  std::shared_ptr<const EpochPlan> get(int epoch) const;

 private:
  const Dataset& dataset_;
  OptionsOf options_of_;
  std::function<void(const EpochPlan&)> on_built_;
  mutable std::mutex mutex_;
  mutable std::map<int, std::shared_ptr<const EpochPlan>> plans_;
};

}  // namespace dflow::data
