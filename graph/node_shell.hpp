#pragma once
// The shell around one replica of a node: everything that is not user code.
// On each firing it (1) takes the joined inputs, whose edges get their credits
// back, (2) times the body and turns an exception into a NodeError naming the
// node, replica and seq, which cancels the run, (3) puts each emitted message
// into its output edge, where the credit it held becomes the item, and gives
// back the credit of every output left silent.
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "graph/description.hpp"
#include "graph/edge.hpp"
#include "graph/node_body.hpp"
#include "graph/run_control.hpp"
#include "graph/stage.hpp"
#include "graph/telemetry.hpp"

namespace dflow::graph {

struct InputSlot {
  int join_port = -1;  // -1: an optional input left unconnected
};

// An ordered edge further down whose credit this node takes (it is the
// fan-out) for the message it emits on one output port.
struct CarriedCredit {
  int join_port = -1;
  BoundedEdge* ordered_edge = nullptr;
};

struct OutputSlot {
  std::vector<BoundedEdge*> edges;   // one; one per consumer replica for a routed port; none when unconnected
  int credit_join_port = -1;         // where this output's credit arrives; -1 when unconnected or carried
  bool credit_carried = false;       // feeds an ordered edge whose fan-out already took the credit
  CreditBuffer* credits = nullptr;   // where an unused credit goes back
  std::vector<CarriedCredit> carried;
};

class NodeShell final : public Firing {
 public:
  NodeShell(const NodeDesc& node, int replica, std::unique_ptr<NodeBody> body, NodeMeter& meter, RunControl& control,
            const std::vector<std::unique_ptr<BoundedEdge>>& edges_by_id);

  void fire(std::span<Message> joined) noexcept override;
  bool exhausted() const { return exhausted_.load(std::memory_order_acquire); }
  const std::string& name() const { return node_.name; }
  int replica() const { return replica_; }

  // Wiring, filled by the builder before the run.
  std::vector<InputSlot> inputs;
  std::vector<OutputSlot> outputs;
  int ticket_port = -1;                             // sources: the ticket that lets them run once more
  tbb::flow::queue_node<Message>* ticket = nullptr;

 private:
  void take_inputs(std::span<Message> joined);
  void run_source();
  void run_function();
  void run_router();
  void deliver();
  template <class Call>
  void timed(Call&& call);

  const NodeDesc& node_;
  const int replica_;
  std::unique_ptr<NodeBody> body_;
  NodeMeter& meter_;
  RunControl& control_;
  const std::vector<std::unique_ptr<BoundedEdge>>& edges_by_id_;
  // Per-firing scratch, reused: the shell is serial.
  std::vector<Message> items_;                 // by input port
  std::vector<std::optional<Message>> emitted_;  // by output port
  std::vector<uint64_t> replica_cost_;         // router: outstanding cost per replica
  std::vector<std::pair<BoundedEdge*, uint64_t>> in_process_;  // input edges and costs of this firing
  std::optional<uint64_t> seq_;                // seq of the firing, for errors and ordered checks
  std::atomic<bool> exhausted_{false};         // source: next() returned false
};

}  // namespace dflow::graph
