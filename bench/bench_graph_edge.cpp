// Per-message cost of a dflow bounded edge (data buffer + credit buffer +
// reserving join + serial rejecting body + telemetry) against a bare oneTBB
// make_edge between serial function_nodes, in ns/message.
//
// Both run the same chain: source -> `stages` pass-through nodes -> sink,
// i.e. stages + 1 edges. The marginal cost of one edge is the difference
// between a long and a short chain, divided by the extra edges.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "config/pipeline.hpp"
#include "graph/builtin_nodes.hpp"
#include "graph/pipeline.hpp"

using namespace dflow;
using namespace dflow::graph;
namespace flow = tbb::flow;

namespace {

constexpr uint64_t kMessages = 200000;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

class CountSource final : public SourceBody {
 public:
  bool next(Emitter& out) override {
    out.emit(make_message(next_, 1, next_));
    return ++next_ < kMessages;
  }

 private:
  uint64_t next_ = 0;
};

class Drop final : public FunctionBody {
 public:
  void process(Inputs& in, Emitter&) override { sum_ += payload<uint64_t>(in[0]); }
  uint64_t sum_ = 0;
};

NodeRegistry bench_registry() {
  NodeRegistry r;
  register_graph_nodes(r);
  r.add({.type = "bench.count", .description = "", .kind = NodeKind::source, .inputs = {},
         .outputs = {{.name = "out", .type = "Number"}}, .check_params = {},
         .make = [](NodeContext&) { return std::make_unique<CountSource>(); }});
  r.add({.type = "bench.drop", .description = "", .kind = NodeKind::function, .inputs = {{.name = "in", .type = "Number"}},
         .outputs = {}, .check_params = {}, .make = [](NodeContext&) { return std::make_unique<Drop>(); }});
  return r;
}

// Seconds for kMessages through source -> stages x pass -> sink, bounded edges.
double run_dflow(int threads, int stages, int capacity) {
  std::string yaml = "pipeline:\n  nodes:\n    - {name: s0, type: bench.count}\n";
  for (int i = 1; i <= stages; ++i) yaml += "    - {name: s" + std::to_string(i) + ", type: pass}\n";
  yaml += "    - {name: sink, type: bench.drop}\n  edges:\n";
  for (int i = 0; i < stages; ++i)
    yaml += "    - {from: s" + std::to_string(i) + ", to: s" + std::to_string(i + 1) + ", capacity: " + std::to_string(capacity) + "}\n";
  yaml += "    - {from: s" + std::to_string(stages) + ", to: sink, capacity: " + std::to_string(capacity) + "}\n";
  auto origins = std::make_shared<config::Origins>();
  origins->file = "<bench>";
  config::YamlSection root(YAML::Load(yaml), "", origins);
  static const NodeRegistry registry = bench_registry();
  auto pipeline = build_pipeline(config::parse_pipeline(root.section("pipeline")), registry, {.threads = threads, .user_context = {}});
  double start = now_s();
  pipeline->run();
  return now_s() - start;
}

// The same chain in bare oneTBB: input_node -> serial function_nodes, make_edge.
double run_bare(int threads, int stages) {
  tbb::task_arena arena(threads);
  double seconds = 0;
  arena.execute([&] {
    flow::graph g;
    uint64_t next = 0, sum = 0;
    flow::input_node<Message> source(g, [&](tbb::flow_control& control) {
      if (next >= kMessages) {
        control.stop();
        return Message{};
      }
      uint64_t v = next++;
      return make_message(v, 1, v);
    });
    std::vector<std::unique_ptr<flow::function_node<Message, Message>>> passes;
    for (int i = 0; i < stages; ++i)
      passes.push_back(std::make_unique<flow::function_node<Message, Message>>(g, flow::serial, [](const Message& m) { return m; }));
    flow::function_node<Message, flow::continue_msg> sink(g, flow::serial, [&](const Message& m) {
      sum += payload<uint64_t>(m);
      return flow::continue_msg();
    });
    flow::sender<Message>* previous = &source;
    for (auto& p : passes) {
      flow::make_edge(*previous, *p);
      previous = p.get();
    }
    flow::make_edge(*previous, sink);
    double start = now_s();
    source.activate();
    g.wait_for_all();
    seconds = now_s() - start;
  });
  return seconds;
}

}  // namespace

int main() {
  std::printf("%llu messages per run; ns/message through the whole chain, and the marginal ns of one more edge\n",
              static_cast<unsigned long long>(kMessages));
  std::printf("%-28s %7s %14s %14s %14s\n", "edge", "threads", "1 edge ns/msg", "5 edges ns/msg", "ns/extra edge");
  for (int threads : {1, 2}) {
    auto report = [&](const char* what, double short_s, double long_s) {
      double per_short = short_s / kMessages * 1e9, per_long = long_s / kMessages * 1e9;
      std::printf("%-28s %7d %14.0f %14.0f %14.0f\n", what, threads, per_short, per_long, (per_long - per_short) / 4);
    };
    run_bare(threads, 0);  // warm up the scheduler's threads
    report("bare tbb make_edge", run_bare(threads, 0), run_bare(threads, 4));
    for (int capacity : {1, 16})
      report(("dflow bounded, capacity " + std::to_string(capacity)).c_str(), run_dflow(threads, 0, capacity),
             run_dflow(threads, 4, capacity));
  }
}
