#include "graph/edge.hpp"

#include <stdexcept>

namespace dflow::graph {

DataBuffer::DataBuffer(flow::graph& g, bool ordered) {
  if (ordered)
    sequencer_ = std::make_unique<flow::sequencer_node<Message>>(
        g, [this](const Message& m) -> size_t { return static_cast<size_t>(m.seq - first_seq()); });
  else
    fifo_ = std::make_unique<flow::queue_node<Message>>(g);
}

flow::sender<Message>& DataBuffer::source() {
  if (sequencer_) return *sequencer_;
  return *fifo_;
}

bool DataBuffer::put(const Message& message) { return sequencer_ ? sequencer_->try_put(message) : fifo_->try_put(message); }

void CreditBuffer::fill() {
  for (int i = 0; i < credits_at_start_; ++i) give_back();
}

void BoundedEdge::put(Message message) {
  if (ordered()) {
    // A seq outside the admitted window would make the sequencer wait (or
    // grow) forever; refuse it loudly instead.
    uint64_t first = data_.first_seq(), next = next_seq_.load(std::memory_order_acquire);
    if (message.seq < first || message.seq >= next)
      throw std::logic_error("seq " + std::to_string(message.seq) + " was never admitted to ordered edge '" + name_ + "'");
  }
  message.edge_id = id_;
  outstanding_cost_.fetch_add(message.cost, std::memory_order_relaxed);
  meter_.on_put();  // before the put: the consumer's on_take must never come first
  if (!data_.put(message))
    throw std::logic_error("edge '" + name_ + "' refused seq " + std::to_string(message.seq) + " (a duplicate sequence number?)");
}

void BoundedEdge::taken() {
  // Occupancy drops before the credit goes back: a router holding a pooled
  // credit can then always find a replica edge with room.
  meter_.on_take();
  credits_.give_back();
}

void BoundedEdge::admit(uint64_t seq) {
  if (!admitted_any_) {
    admitted_any_ = true;
    data_.set_first_seq(seq);
  } else if (seq != next_seq_.load(std::memory_order_relaxed)) {
    throw std::runtime_error("ordered edge '" + name_ + "' needs consecutive sequence numbers; got seq " + std::to_string(seq) +
                             " after " + std::to_string(next_seq_.load() - 1));
  }
  next_seq_.store(seq + 1, std::memory_order_release);
}

}  // namespace dflow::graph
