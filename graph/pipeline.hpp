#pragma once
// A built pipeline: the declared graph as oneTBB nodes, ready to run once.
//
//   auto pipeline = graph::build_pipeline(config.pipeline, registry, {.threads = 2, .user_context = state});
//   pipeline->run();   // returns when the sources are exhausted and every data edge drained
//
// run() executes inside a task_arena of `threads`; an exception in any node
// body cancels the graph and run() throws graph::NodeError after every body
// has returned (no thread is left running user code).
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include <any>
#include <memory>
#include <stop_token>
#include <utility>
#include <vector>

#include "config/pipeline.hpp"
#include "graph/description.hpp"
#include "graph/edge.hpp"
#include "graph/errors.hpp"
#include "graph/node_shell.hpp"
#include "graph/registry.hpp"
#include "graph/run_control.hpp"
#include "graph/stage.hpp"
#include "graph/telemetry.hpp"

namespace dflow::graph {

enum class RunEnd { completed, cancelled };

struct BuildOptions {
  int threads = 2;         // task_arena size (run.threads)
  std::any user_context;   // handed to every node factory as NodeContext::user
};

class Pipeline {
 public:
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline();

  // Runs once. Returns completed when every source is exhausted and every
  // data edge drained (tokens resting on token edges do not count), or
  // cancelled after cancel(). Throws NodeError when a node failed and
  // StallError when the graph went idle with work left.
  RunEnd run();
  void cancel();  // any thread, any time
  bool is_cancelled() const { return control_.cancelled(); }
  std::stop_token stop_token() const { return control_.stop_token(); }

  TelemetrySnapshot telemetry() const { return board_.snapshot(); }
  const TelemetryBoard& telemetry_board() const { return board_; }
  const GraphDescription& description() const { return description_; }
  int threads() const { return threads_; }

 private:
  friend class PipelineBuilder;
  Pipeline(GraphDescription description, int threads);
  bool drained() const;
  std::string stall_report() const;

  // Members are destroyed in reverse order: every oneTBB node before its
  // graph, the graph before the arena it is attached to.
  GraphDescription description_;
  const int threads_;
  tbb::task_arena arena_;
  RunControl control_;
  TelemetryBoard board_;
  std::unique_ptr<tbb::flow::graph> graph_;
  std::vector<std::unique_ptr<CreditBuffer>> credits_;
  std::vector<std::unique_ptr<DataBuffer>> buffers_;
  std::vector<std::unique_ptr<BoundedEdge>> edges_;  // index = Message::edge_id
  std::vector<std::unique_ptr<tbb::flow::queue_node<Message>>> tickets_;
  std::vector<std::unique_ptr<NodeShell>> shells_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<NodeShell*> sources_;
  std::vector<std::pair<BoundedEdge*, int>> initial_tokens_;  // token edge, tokens placed at start
  bool ran_ = false;
};

// Describes (validates) the declaration, builds every node body through the
// registry, and wires the graph. Throws ConfigError for declaration errors.
std::unique_ptr<Pipeline> build_pipeline(const config::PipelineConfig& pipeline, const NodeRegistry& registry,
                                         BuildOptions options = {});

}  // namespace dflow::graph
