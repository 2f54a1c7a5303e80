#include "graph/pipeline.hpp"

#include <stdexcept>

namespace dflow::graph {

Pipeline::Pipeline(GraphDescription description, int threads)
    : description_(std::move(description)), threads_(threads), arena_(threads) {}

Pipeline::~Pipeline() {
  // Wiring spawns forwarding tasks in the graph; a graph that never ran (or
  // whose build failed half way) still holds them, and they touch the nodes.
  // Skip them and let them finish while every node still exists: the
  // members below are destroyed right after, nodes before the graph.
  if (graph_)
    arena_.execute([&] {
      graph_->cancel();
      graph_->wait_for_all();
    });
}

void Pipeline::cancel() { control_.cancel(); }

RunEnd Pipeline::run() {
  if (ran_) throw std::logic_error("a pipeline runs once; build a new one");
  ran_ = true;
  if (!control_.cancelled()) {
    arena_.execute([&] {
      board_.start();
      for (auto& c : credits_) c->fill();
      for (auto [edge, count] : initial_tokens_)
        for (int i = 0; i < count; ++i) edge->put(make_message(static_cast<uint64_t>(i), 0, Token{static_cast<uint64_t>(i)}));
      for (auto& ticket : tickets_) ticket->try_put(Message{});
      // Returns when no task is left: finished, cancelled, failed or stalled.
      // Tasks of a cancelled graph are skipped, running bodies finish first.
      graph_->wait_for_all();
    });
  }
  if (auto failure = control_.failure()) throw *failure;
  if (drained()) return RunEnd::completed;
  if (control_.cancelled()) return RunEnd::cancelled;
  throw StallError(stall_report());
}

bool Pipeline::drained() const {
  for (const NodeShell* s : sources_)
    if (!s->exhausted()) return false;
  for (const auto& e : board_.snapshot().edges)
    if (!e.token && e.occupancy > 0) return false;
  return true;
}

std::string Pipeline::stall_report() const {
  std::string waiting;
  for (const NodeShell* s : sources_)
    if (!s->exhausted()) waiting += (waiting.empty() ? "" : ", ") + ("source '" + s->name() + "' is not exhausted");
  for (const auto& e : board_.snapshot().edges)
    if (!e.token && e.occupancy > 0)
      waiting += (waiting.empty() ? "" : ", ") + ("'" + e.name + "' holds " + std::to_string(e.occupancy) + " of " + std::to_string(e.capacity));
  return "graph stalled: no node can fire, but " + waiting +
         ". Look for a token cycle without enough initial tokens, or a node that emits on only some of the ports other nodes wait for";
}

}  // namespace dflow::graph
