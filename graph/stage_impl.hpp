#pragma once
// The templated stage; included only by stage_narrow.cpp and stage_wide.cpp
// (two translation units so the ten join widths compile in parallel).
#include <array>
#include <tuple>
#include <utility>

#include "graph/stage.hpp"

namespace dflow::graph::detail {

namespace flow = tbb::flow;

template <size_t>
using MessageAt = Message;

template <size_t... I>
auto message_tuple(std::index_sequence<I...>) -> std::tuple<MessageAt<I>...>;

template <size_t N>
using MessageTuple = decltype(message_tuple(std::make_index_sequence<N>{}));

template <size_t N>
class StageOf final : public Stage {
  using Tuple = MessageTuple<N>;

 public:
  StageOf(flow::graph& g, Firing& firing, bool high_priority)
      : join_(g),
        body_(g, flow::serial,
              [&firing](const Tuple& joined) {
                auto items = std::apply([](const auto&... m) { return std::array<Message, N>{m...}; }, joined);
                firing.fire(items);
                return flow::continue_msg();
              },
              flow::rejecting(), high_priority ? flow::node_priority_t{1} : flow::no_priority),
        ports_(port_table(std::make_index_sequence<N>{})) {
    flow::make_edge(join_, body_);
  }
  size_t width() const override { return N; }
  flow::receiver<Message>& port(size_t index) override { return *ports_.at(index); }

 private:
  template <size_t... I>
  std::array<flow::receiver<Message>*, N> port_table(std::index_sequence<I...>) {
    return {&flow::input_port<I>(join_)...};
  }
  flow::join_node<Tuple, flow::reserving> join_;
  flow::function_node<Tuple, flow::continue_msg, flow::rejecting> body_;
  std::array<flow::receiver<Message>*, N> ports_;
};

}  // namespace dflow::graph::detail

namespace dflow::graph {
template <size_t N>
std::unique_ptr<Stage> make_stage_of_width(tbb::flow::graph& g, Firing& firing, bool high_priority) {
  return std::make_unique<detail::StageOf<N>>(g, firing, high_priority);
}
}  // namespace dflow::graph

#define DFLOW_STAGE_WIDTH(N) template std::unique_ptr<Stage> make_stage_of_width<N>(tbb::flow::graph&, Firing&, bool);
