#include "graph/node_shell.hpp"

#include <stdexcept>

namespace dflow::graph {

NodeShell::NodeShell(const NodeDesc& node, int replica, std::unique_ptr<NodeBody> body, NodeMeter& meter, RunControl& control,
                     const std::vector<std::unique_ptr<BoundedEdge>>& edges_by_id)
    : node_(node), replica_(replica), body_(std::move(body)), meter_(meter), control_(control), edges_by_id_(edges_by_id) {
  items_.resize(node.inputs.size());
  emitted_.resize(node.outputs.size());
}

void NodeShell::fire(std::span<Message> joined) noexcept {
  try {
    take_inputs(joined);
    // After a failure or cancel() no user code starts; whatever the graph
    // still holds is abandoned with it.
    if (control_.cancelled()) return;
    switch (node_.kind) {
      case NodeKind::source: run_source(); break;
      case NodeKind::function: run_function(); break;
      case NodeKind::router: run_router(); break;
    }
  } catch (const std::exception& e) {
    control_.fail(NodeError(node_.name, replica_, node_.replicas, seq_, e.what()));
  } catch (...) {
    control_.fail(NodeError(node_.name, replica_, node_.replicas, seq_, "unknown exception"));
  }
}

void NodeShell::take_inputs(std::span<Message> joined) {
  seq_.reset();
  in_process_.clear();
  std::optional<uint64_t> token_seq;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].join_port < 0) continue;
    Message& m = joined[inputs[i].join_port];
    BoundedEdge& edge = *edges_by_id_.at(m.edge_id);
    edge.taken();  // the item has left its edge: its credit goes back now
    in_process_.push_back({&edge, m.cost});
    // Errors name the data message, not the token that came with it.
    if (!seq_ && !edge.token()) seq_ = m.seq;
    if (!token_seq) token_seq = m.seq;
    items_[i] = std::move(m);
  }
  if (!seq_) seq_ = token_seq;
}

template <class Call>
void NodeShell::timed(Call&& call) {
  auto start = SteadyClock::now();
  try {
    call();
  } catch (...) {
    meter_.on_call(std::chrono::duration<double>(SteadyClock::now() - start).count(), true);
    throw;
  }
  meter_.on_call(std::chrono::duration<double>(SteadyClock::now() - start).count(), false);
}

void NodeShell::run_function() {
  for (auto& e : emitted_) e.reset();
  Inputs in(node_.inputs, items_, node_.input_connected);
  Emitter out(node_.outputs, emitted_, node_.output_connected);
  auto& body = static_cast<FunctionBody&>(*body_);
  timed([&] { body.process(in, out); });
  for (auto [edge, cost] : in_process_) edge->finished(cost);
  deliver();
}

void NodeShell::run_source() {
  for (auto& e : emitted_) e.reset();
  Emitter out(node_.outputs, emitted_, node_.output_connected);
  auto& body = static_cast<SourceBody&>(*body_);
  bool more = true;
  timed([&] { more = body.next(out); });
  deliver();
  if (more)
    ticket->try_put(Message{});
  else
    exhausted_.store(true, std::memory_order_release);
}

void NodeShell::run_router() {
  Message& message = items_[0];
  OutputSlot& slot = outputs[0];
  size_t replicas = slot.edges.size();
  if (replicas == 0) return;  // optional routed output left unconnected
  replica_cost_.resize(replicas);
  for (size_t r = 0; r < replicas; ++r)
    replica_cost_[r] = slot.edges[r]->has_room() ? slot.edges[r]->outstanding_cost() : kReplicaFull;
  size_t choice = 0;
  auto& body = static_cast<RouterBody&>(*body_);
  timed([&] { choice = body.choose(message, replica_cost_); });
  if (choice >= replicas || replica_cost_[choice] == kReplicaFull) {
    // A full replica cannot take more: fall back to the least loaded with room.
    choice = replicas;
    for (size_t r = 0; r < replicas; ++r)
      if (replica_cost_[r] != kReplicaFull && (choice == replicas || replica_cost_[r] < replica_cost_[choice])) choice = r;
  }
  // The pooled credit guarantees room: occupancy drops before a credit returns.
  if (choice == replicas)
    throw std::logic_error("no replica edge of '" + slot.edges[0]->name() + "' has room although the router holds a credit");
  for (auto [edge, cost] : in_process_) edge->finished(cost);
  for (auto& c : slot.carried) c.ordered_edge->admit(message.seq);
  slot.edges[choice]->put(std::move(message));
}

void NodeShell::deliver() {
  for (size_t k = 0; k < outputs.size(); ++k) {
    OutputSlot& slot = outputs[k];
    std::optional<Message>& message = emitted_[k];
    const std::string& port = node_.outputs[k].name;
    if (!message) {
      if (slot.credit_carried)
        throw std::runtime_error("emitted nothing on '" + port + "', which feeds ordered edge '" + slot.edges[0]->name() +
                                 "': it needs exactly one message per input (its consumer waits for every seq)");
      if (slot.credit_join_port >= 0) slot.credits->give_back();
      for (auto& c : slot.carried) c.ordered_edge->credits().give_back();
      continue;
    }
    if (slot.edges.empty()) continue;  // optional output left unconnected: dropped by declaration
    BoundedEdge& edge = *slot.edges.front();
    if (slot.credit_carried && message->seq != seq_)
      throw std::runtime_error("emitted seq " + std::to_string(message->seq) + " on '" + port + "' for input seq " +
                               std::to_string(seq_.value_or(0)) + "; ordered edge '" + edge.name() + "' needs the input's seq");
    if (edge.ordered() && !slot.credit_carried) edge.admit(message->seq);
    for (auto& c : slot.carried) c.ordered_edge->admit(message->seq);
    edge.put(std::move(*message));
  }
}

}  // namespace dflow::graph
