// route.least_loaded (default) and route.round_robin: hand each batch to one
// target worker. least_loaded picks the worker with the fewest outstanding
// padded tokens (queued on its edge plus in progress), so a slow worker gets
// less work instead of a queue that silently grows.
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class LeastLoaded final : public graph::RouterBody {
 public:
  size_t choose(const graph::Message&, std::span<const uint64_t> outstanding_cost) override {
    size_t best = 0;
    for (size_t r = 1; r < outstanding_cost.size(); ++r)
      if (outstanding_cost[r] < outstanding_cost[best]) best = r;
    return best;
  }
};

class RoundRobin final : public graph::RouterBody {
 public:
  size_t choose(const graph::Message&, std::span<const uint64_t> outstanding_cost) override {
    return next_++ % outstanding_cost.size();
  }

 private:
  size_t next_ = 0;
};

template <class Body>
void register_router(graph::NodeRegistry& registry, const std::string& type, const std::string& description) {
  graph::NodeSpec spec;
  spec.type = type;
  spec.description = description;
  spec.kind = graph::NodeKind::router;
  // Any payload: routing looks only at Message::cost (padded tokens here).
  spec.inputs = {{"in", graph::kAnyType}};
  spec.outputs = {{"out", graph::kAnyType, false, true}};
  spec.make = [](graph::NodeContext&) -> std::unique_ptr<graph::NodeBody> { return std::make_unique<Body>(); };
  registry.add(std::move(spec));
}

}  // namespace

void register_routers(graph::NodeRegistry& registry) {
  register_router<LeastLoaded>(registry, "route.least_loaded",
                               "to the target worker with the fewest outstanding padded tokens");
  register_router<RoundRobin>(registry, "route.round_robin", "to target workers in turn (for comparison)");
}

}  // namespace dflow::nodes
