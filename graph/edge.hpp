#pragma once
// A bounded edge (invariant 2) in oneTBB terms: a data buffer plus a credit
// buffer pre-filled with `capacity` credits. A producer's join reserves one
// credit per output edge before it may fire, so a full edge stops its
// producer, nothing is dropped, and occupancy <= capacity by construction.
#include <oneapi/tbb/flow_graph.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "graph/message.hpp"
#include "graph/telemetry.hpp"

namespace dflow::graph {

namespace flow = tbb::flow;

// The items waiting at one input port (of one replica, for a routed edge):
// FIFO, or for an ordered port a sequencer that releases seq k only after k-1.
class DataBuffer {
 public:
  DataBuffer(flow::graph& g, bool ordered);
  flow::sender<Message>& source();
  bool put(const Message& message);
  // Ordered: the seq that fills the sequencer's first slot; set by the credit
  // taker before that item can reach the buffer.
  void set_first_seq(uint64_t seq) { first_seq_.store(seq, std::memory_order_release); }
  uint64_t first_seq() const { return first_seq_.load(std::memory_order_acquire); }
  bool ordered() const { return sequencer_ != nullptr; }

 private:
  std::atomic<uint64_t> first_seq_{0};
  std::unique_ptr<flow::queue_node<Message>> fifo_;
  std::unique_ptr<flow::sequencer_node<Message>> sequencer_;
};

// Credits of one edge, or one pool for all replica edges of a router's fan-out.
class CreditBuffer {
 public:
  CreditBuffer(flow::graph& g, int credits_at_start) : node_(g), credits_at_start_(credits_at_start) {}
  flow::queue_node<Message>& node() { return node_; }
  void fill();  // run start
  void give_back() { node_.try_put(Message{}); }

 private:
  flow::queue_node<Message> node_;
  const int credits_at_start_;
};

class BoundedEdge {
 public:
  BoundedEdge(uint32_t id, std::string name, int capacity, bool token, EdgeMeter& meter, DataBuffer& data, CreditBuffer& credits)
      : id_(id), capacity_(capacity), token_(token), name_(std::move(name)), meter_(meter), data_(data), credits_(credits) {}

  // Producer side: the caller holds this edge's credit (or its fan-out took it).
  void put(Message message);
  // Consumer side: the item left the edge, its credit goes back.
  void taken();
  // Consumer finished processing it: its cost is no longer outstanding.
  void finished(uint64_t cost) { outstanding_cost_.fetch_sub(cost, std::memory_order_relaxed); }
  // Ordered edge, called by its credit taker only (serial): seqs must be consecutive.
  void admit(uint64_t seq);

  uint64_t outstanding_cost() const { return outstanding_cost_.load(std::memory_order_relaxed); }
  bool has_room() const { return meter_.occupancy() < capacity_; }
  bool token() const { return token_; }
  bool ordered() const { return data_.ordered(); }
  CreditBuffer& credits() { return credits_; }
  const std::string& name() const { return name_; }

 private:
  const uint32_t id_;  // index in the pipeline's edge table; stamped on every message
  const int capacity_;
  const bool token_;
  const std::string name_;  // "from.port->to.port", for errors
  EdgeMeter& meter_;
  DataBuffer& data_;
  CreditBuffer& credits_;
  std::atomic<uint64_t> outstanding_cost_{0};  // queued + being processed by the consumer
  bool admitted_any_ = false;                  // ordered: guarded by the credit taker's serial shell
  std::atomic<uint64_t> next_seq_{0};          // ordered: read by the replicas' put checks
};

}  // namespace dflow::graph
