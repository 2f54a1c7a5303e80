#include "graph/run_control.hpp"

namespace dflow::graph {

NodeError::NodeError(std::string node, int replica, int replicas, std::optional<uint64_t> seq, std::string cause)
    : std::runtime_error("node '" + node + "'" + (replicas > 1 ? " (replica " + std::to_string(replica) + ")" : "") + " failed " +
                         (seq ? "on message seq " + std::to_string(*seq) : std::string("producing its next message")) + ": " +
                         cause),
      node_(std::move(node)),
      replica_(replica),
      seq_(seq),
      cause_(std::move(cause)) {}

void RunControl::cancel() {
  cancelled_.store(true, std::memory_order_release);
  stop_.request_stop();
  if (graph_) graph_->cancel();  // thread-safe: cancels the graph's task_group_context
}

void RunControl::fail(NodeError error) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::move(error);
  }
  cancel();
}

std::optional<NodeError> RunControl::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

}  // namespace dflow::graph
