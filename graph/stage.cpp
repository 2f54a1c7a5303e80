#include "graph/stage.hpp"

#include <array>
#include <stdexcept>
#include <string>

#include "graph/description.hpp"

namespace dflow::graph {

// stage.hpp declares (and stage_narrow/wide.cpp instantiate) widths 1..10.
static_assert(kMaxJoinPorts == 10, "update the instantiated stage widths with kMaxJoinPorts");

namespace {
template <size_t... I>
constexpr auto factory_table(std::index_sequence<I...>) {
  using Factory = std::unique_ptr<Stage> (*)(tbb::flow::graph&, Firing&, bool);
  return std::array<Factory, sizeof...(I)>{&make_stage_of_width<I + 1>...};
}
}  // namespace

std::unique_ptr<Stage> make_stage(tbb::flow::graph& g, size_t width, Firing& firing, bool high_priority) {
  static constexpr auto factories = factory_table(std::make_index_sequence<kMaxJoinPorts>{});
  if (width < 1 || width > factories.size())
    throw std::logic_error("join width " + std::to_string(width) + " outside 1.." + std::to_string(factories.size()));
  return factories[width - 1](g, firing, high_priority);
}

}  // namespace dflow::graph
