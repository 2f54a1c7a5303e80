// From a validated description to oneTBB nodes. Each declared edge becomes a
// data buffer plus a credit buffer; each node replica becomes a stage (join +
// serial body) whose join takes its inputs and one credit per output edge.
//
// Two refinements of "one credit per output edge":
// - A router's routed output into W replicas is W edges (one data buffer
//   each) sharing ONE pool of W x capacity credits. The router fires when any
//   replica has room (a per-replica credit in the join would stall the router
//   while any single replica is full); the shell then picks a replica whose
//   occupancy is below capacity, which exists because a consumer lowers the
//   occupancy before it returns the credit.
// - An ordered edge behind a fan-out (router -> replicas -> reorder) takes its
//   credits at the fan-out, not at the replicas. Otherwise a later seq could
//   fill the ordered edge while an earlier one still waits in a busy replica's
//   queue, and the reorder would wait for it forever. With the credit taken at
//   the fan-out, every item in flight between fan-out and reorder owns a slot
//   of the ordered edge, so the earliest can always arrive.
//
// A source is a stage too, joined on a one-item "ticket" queue that its shell
// refills after each call to next(). (A oneTBB input_node would call the body
// under its spin mutex, so a thread reserving from it spins for as long as a
// slow source reads, and it would hold one item ahead, outside any edge.)
#include <map>
#include <stdexcept>

#include "graph/pipeline.hpp"

namespace dflow::graph {

class PipelineBuilder {
 public:
  static std::unique_ptr<Pipeline> make(GraphDescription description, BuildOptions& options) {
    std::unique_ptr<Pipeline> built(new Pipeline(std::move(description), options.threads));
    // Inside the arena: the flow graph attaches to the arena it is built in.
    built->arena_.execute([&] { PipelineBuilder(*built, options).build(); });
    return built;
  }

 private:
  PipelineBuilder(Pipeline& pipeline, BuildOptions& options) : p_(pipeline), d_(pipeline.description_), options_(options) {}

  void build() {
    p_.graph_ = std::make_unique<tbb::flow::graph>();
    p_.control_.attach(*p_.graph_);
    make_buffers();
    make_edges();
    for (size_t n = 0; n < d_.nodes.size(); ++n)
      for (int r = 0; r < d_.nodes[n].replicas; ++r) make_shell(static_cast<int>(n), r);
  }

  tbb::flow::graph& g() { return *p_.graph_; }

  // The buffer of input port `port` of node `node` seen by replica `replica`.
  DataBuffer* buffer_of(int node, int port, int replica) {
    auto& per_replica = buffers_[{node, port}];
    return per_replica.size() == 1 ? per_replica[0] : per_replica.at(replica);
  }

  void make_buffers() {
    for (const auto& e : d_.edges) {
      auto& slot = buffers_[{e.to_node, e.to_port}];
      if (!slot.empty()) continue;  // several edges merge into one port: one buffer
      int count = e.routed ? d_.nodes[e.to_node].replicas : 1;
      for (int r = 0; r < count; ++r) {
        p_.buffers_.push_back(std::make_unique<DataBuffer>(g(), e.ordered));
        slot.push_back(p_.buffers_.back().get());
      }
    }
  }

  BoundedEdge& add_edge(const EdgeDesc& e, std::string name, int capacity, DataBuffer& data, CreditBuffer& credits) {
    EdgeMeter& meter = p_.board_.add_edge(name, capacity, e.token);
    auto id = static_cast<uint32_t>(p_.edges_.size());
    p_.edges_.push_back(std::make_unique<BoundedEdge>(id, std::move(name), capacity, e.token, meter, data, credits));
    return *p_.edges_.back();
  }

  void make_edges() {
    for (const auto& e : d_.edges) {
      const NodeDesc& consumer = d_.nodes[e.to_node];
      std::vector<BoundedEdge*> pieces;
      if (e.routed) {
        p_.credits_.push_back(std::make_unique<CreditBuffer>(g(), e.capacity * consumer.replicas));
        for (int r = 0; r < consumer.replicas; ++r) {
          auto at = e.name.find("->") + 2 + consumer.name.size();
          std::string name = e.name.substr(0, at) + "[" + std::to_string(r) + "]" + e.name.substr(at);
          pieces.push_back(&add_edge(e, name, e.capacity, *buffer_of(e.to_node, e.to_port, r), *p_.credits_.back()));
        }
      } else {
        // Shared by the consumer's replicas (whoever is free takes the next item): capacity per replica.
        int capacity = e.capacity * consumer.replicas;
        p_.credits_.push_back(std::make_unique<CreditBuffer>(g(), capacity - e.initial));
        pieces.push_back(&add_edge(e, e.name, capacity, *buffer_of(e.to_node, e.to_port, 0), *p_.credits_.back()));
        if (e.initial > 0) p_.initial_tokens_.emplace_back(pieces.back(), e.initial);
      }
      runtime_edges_.push_back(std::move(pieces));
      credit_of_.push_back(p_.credits_.back().get());
    }
  }

  std::unique_ptr<NodeBody> make_body(const NodeDesc& node, int replica, NodeMeter& meter) {
    NodeContext context{node.name,
                        node.type,
                        replica,
                        node.replicas,
                        config::YamlSection(node.params, node.key_path + ".params", node.origins),
                        options_.user_context,
                        p_.control_.stop_token(),
                        &p_.board_,
                        &meter};
    std::unique_ptr<NodeBody> body;
    const std::string where = "node '" + node.name + "' (" + node.type + ")";
    try {
      body = node.spec->make(context);
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": " + e.what());  // a declaration or config error: still a usage error
    } catch (const std::exception& e) {
      throw std::runtime_error(where + " could not be built: " + e.what());
    }
    bool fits = node.kind == NodeKind::source     ? dynamic_cast<SourceBody*>(body.get()) != nullptr
                : node.kind == NodeKind::function ? dynamic_cast<FunctionBody*>(body.get()) != nullptr
                                                  : dynamic_cast<RouterBody*>(body.get()) != nullptr;
    if (!fits)
      throw std::logic_error("node type '" + node.type + "' is a " + kind_name(node.kind) +
                             " but its factory built no matching body (SourceBody, FunctionBody or RouterBody)");
    return body;
  }

  void make_shell(int n, int replica) {
    const NodeDesc& node = d_.nodes[n];
    NodeMeter& meter = p_.board_.add_node(node.name, replica, node.replicas);
    auto shell = std::make_unique<NodeShell>(node, replica, make_body(node, replica, meter), meter, p_.control_, p_.edges_);
    std::vector<tbb::flow::sender<Message>*> feeds;  // by join port
    if (node.kind == NodeKind::source) {
      p_.tickets_.push_back(std::make_unique<tbb::flow::queue_node<Message>>(g()));
      shell->ticket = p_.tickets_.back().get();
      shell->ticket_port = static_cast<int>(feeds.size());
      feeds.push_back(shell->ticket);
      p_.sources_.push_back(shell.get());
    }
    shell->inputs.resize(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!node.input_connected[i]) continue;
      shell->inputs[i].join_port = static_cast<int>(feeds.size());
      feeds.push_back(&buffer_of(n, static_cast<int>(i), replica)->source());
    }
    shell->outputs.resize(node.outputs.size());
    for (size_t k = 0; k < d_.edges.size(); ++k) {
      const EdgeDesc& e = d_.edges[k];
      if (e.from_node != n) continue;
      OutputSlot& slot = shell->outputs[e.from_port];
      slot.edges = runtime_edges_[k];
      slot.credits = credit_of_[k];
      if (e.credit_taker == n) {
        slot.credit_join_port = static_cast<int>(feeds.size());
        feeds.push_back(&credit_of_[k]->node());
      } else {
        slot.credit_carried = true;  // the fan-out upstream took it
      }
    }
    for (size_t k = 0; k < d_.edges.size(); ++k) {
      const EdgeDesc& e = d_.edges[k];
      if (e.credit_taker != n || e.from_node == n) continue;
      OutputSlot& carrier = shell->outputs[d_.edges[e.carried_by].from_port];
      carrier.carried.push_back({static_cast<int>(feeds.size()), runtime_edges_[k].front()});
      feeds.push_back(&credit_of_[k]->node());
    }
    if (static_cast<int>(feeds.size()) != node.join_ports)
      throw std::logic_error("node '" + node.name + "': wired " + std::to_string(feeds.size()) + " join ports, described " +
                             std::to_string(node.join_ports));
    p_.stages_.push_back(make_stage(g(), feeds.size(), *shell, node.spec->high_priority));
    for (size_t port = 0; port < feeds.size(); ++port) tbb::flow::make_edge(*feeds[port], p_.stages_.back()->port(port));
    p_.shells_.push_back(std::move(shell));
  }

  Pipeline& p_;
  const GraphDescription& d_;
  BuildOptions& options_;
  std::map<std::pair<int, int>, std::vector<DataBuffer*>> buffers_;  // (node, input port) -> per replica, or one shared
  std::vector<std::vector<BoundedEdge*>> runtime_edges_;            // by described edge
  std::vector<CreditBuffer*> credit_of_;                             // by described edge
};

std::unique_ptr<Pipeline> build_pipeline(const config::PipelineConfig& pipeline, const NodeRegistry& registry, BuildOptions options) {
  if (options.threads < 1) throw ConfigError("run.threads must be >= 1 (the graph's task arena size)");
  return PipelineBuilder::make(describe(pipeline, registry), options);
}

}  // namespace dflow::graph
