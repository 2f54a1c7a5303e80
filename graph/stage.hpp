#pragma once
// One node instance's firing rule in oneTBB terms: a reserving join over its
// input buffers and its output credits, feeding a serial, rejecting
// function_node. Reserving: nothing is taken until every port has an item.
// Rejecting: the join fires only when the body is free, so no item hides in
// a function_node's internal queue. The join width is a compile-time tuple
// size; widths 1..kMaxJoinPorts are generated (stage_narrow.cpp, stage_wide.cpp)
// and picked at run time. Every element is a Message.
#include <oneapi/tbb/flow_graph.h>

#include <cstddef>
#include <memory>
#include <span>

#include "graph/message.hpp"

namespace dflow::graph {

// What a stage calls with the joined items (one per join port, in port order).
class Firing {
 public:
  virtual ~Firing() = default;
  virtual void fire(std::span<Message> joined) noexcept = 0;
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual size_t width() const = 0;
  virtual tbb::flow::receiver<Message>& port(size_t index) = 0;
};

// Throws std::logic_error for a width outside 1..kMaxJoinPorts. A
// high-priority stage's firings run before queued normal tasks.
std::unique_ptr<Stage> make_stage(tbb::flow::graph& g, size_t width, Firing& firing, bool high_priority = false);

// Instantiated for 1..kMaxJoinPorts in stage_narrow.cpp and stage_wide.cpp.
template <size_t N>
std::unique_ptr<Stage> make_stage_of_width(tbb::flow::graph& g, Firing& firing, bool high_priority);
#define DFLOW_EXTERN_STAGE(N) \
  extern template std::unique_ptr<Stage> make_stage_of_width<N>(tbb::flow::graph&, Firing&, bool);
DFLOW_EXTERN_STAGE(1) DFLOW_EXTERN_STAGE(2) DFLOW_EXTERN_STAGE(3) DFLOW_EXTERN_STAGE(4) DFLOW_EXTERN_STAGE(5)
DFLOW_EXTERN_STAGE(6) DFLOW_EXTERN_STAGE(7) DFLOW_EXTERN_STAGE(8) DFLOW_EXTERN_STAGE(9) DFLOW_EXTERN_STAGE(10)
#undef DFLOW_EXTERN_STAGE

}  // namespace dflow::graph
