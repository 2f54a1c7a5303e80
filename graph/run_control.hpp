#pragma once
// The stop switch of one run: cancel() from any thread, or the first node
// failure, cancels the oneTBB graph (its task_group_context) so no further
// body starts; the shells also check cancelled() before calling user code.
#include <oneapi/tbb/flow_graph.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <stop_token>

#include "graph/errors.hpp"

namespace dflow::graph {

class RunControl {
 public:
  void attach(tbb::flow::graph& g) { graph_ = &g; }
  void cancel();
  void fail(NodeError error);  // the first failure wins; cancels the run
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  std::stop_token stop_token() const { return stop_.get_token(); }
  std::optional<NodeError> failure() const;

 private:
  std::atomic<bool> cancelled_{false};
  std::stop_source stop_;
  tbb::flow::graph* graph_ = nullptr;
  mutable std::mutex mutex_;
  std::optional<NodeError> failure_;  // guarded by mutex_
};

}  // namespace dflow::graph
