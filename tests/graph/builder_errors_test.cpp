// Every declaration error names the place (file:line:col and key path) and,
// for names, the closest known one.
#include <doctest/doctest.h>

#include "test_nodes.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

namespace {
std::string pipeline(const std::string& nodes, const std::string& edges) {
  return "pipeline:\n  nodes:\n" + nodes + (edges.empty() ? "  edges: []\n" : "  edges:\n" + edges);
}
const std::string kSrcSink =
    "    - {name: src, type: test.count}\n"
    "    - {name: sink, type: test.sink}\n";

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("'" << part << "' not in: " << text);
  return false;
}
}  // namespace

TEST_CASE("Graph.Builder.unknown_node_type") {
  auto what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: w, type: test.wrk}\n", ""));
  CHECK(what == "test.yaml:4:7: pipeline.nodes[1].type: unknown node type 'test.wrk', did you mean 'test.work'?");
  what = describe_error(pipeline("    - {name: src, type: zzzzzz}\n", ""));
  CHECK(has(what, "unknown node type 'zzzzzz'; known types: pass, reorder, test.accumulate,"));
}

TEST_CASE("Graph.Builder.duplicate_and_malformed_node_names") {
  auto what = describe_error(pipeline(kSrcSink + "    - {name: src, type: test.sink}\n", ""));
  CHECK(what == "test.yaml:5:7: pipeline.nodes[2].name: duplicate node name 'src' (first declared at test.yaml:3:7)");
  what = describe_error(pipeline("    - {name: a.b, type: test.count}\n", ""));
  CHECK(has(what, "pipeline.nodes[0].name: node name 'a.b' may not contain '.'"));
}

TEST_CASE("Graph.Builder.unknown_node_in_edge") {
  auto what = describe_error(pipeline(kSrcSink, "    - {from: src, to: snk, capacity: 2}\n"));
  CHECK(what == "test.yaml:6:7: pipeline.edges[0].to: unknown node 'snk', did you mean 'sink'?");
}

TEST_CASE("Graph.Builder.unknown_or_ambiguous_port") {
  auto what = describe_error(pipeline(kSrcSink, "    - {from: src.outt, to: sink, capacity: 2}\n"));
  CHECK(what == "test.yaml:6:7: pipeline.edges[0].from: node 'src' (test.count) has no output port 'outt', did you mean 'out'? "
                "(output ports: out)");
  what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: pair, type: test.pair}\n",
                                 "    - {from: src, to: pair, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[0].to: node 'pair' (test.pair) has several input ports (a, b): write 'pair.<port>'"));
  what = describe_error(pipeline(kSrcSink, "    - {from: sink, to: src, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[0].from: node 'sink' (test.sink) has no output ports"));
  what = describe_error(pipeline(kSrcSink + "    - {name: w, type: test.work}\n", "    - {from: w, to: src, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[0].to: node 'src' (test.count) is a source and takes no input"));
}

TEST_CASE("Graph.Builder.mismatched_port_types") {
  auto what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: d, type: test.drafter}\n",
                                      "    - {from: src, to: d.token, capacity: 2}\n"));
  CHECK(what == "test.yaml:6:7: pipeline.edges[0]: type mismatch: 'src.out' carries 'Number' but 'd.token' takes 'Token'");
}

TEST_CASE("Graph.Builder.unconnected_port") {
  auto what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: pair, type: test.pair}\n",
                                      "    - {from: src, to: pair.a, capacity: 2}\n"));
  CHECK(what == "test.yaml:4:7: pipeline.nodes[1]: input port 'pair.b' is not connected; add an edge {to: pair.b}");
  what = describe_error(pipeline(kSrcSink, ""));
  CHECK(has(what, "pipeline.nodes[0]: output port 'src.out' is not connected; add an edge {from: src.out}"));
}

TEST_CASE("Graph.Builder.output_connected_twice") {
  auto what = describe_error(pipeline(kSrcSink + "    - {name: sink2, type: test.sink}\n",
                                      "    - {from: src, to: sink, capacity: 2}\n    - {from: src, to: sink2, capacity: 2}\n"));
  CHECK(what == "test.yaml:8:7: pipeline.edges[1].from: output port 'src.out' is already connected by pipeline.edges[0] "
                "(test.yaml:7:7); an output port feeds exactly one edge");
}

TEST_CASE("Graph.Builder.cycle_without_token_edge") {
  std::string nodes =
      "    - {name: load, type: test.count}\n    - {name: d, type: test.drafter}\n    - {name: acc, type: test.accumulate}\n"
      "    - {name: opt, type: test.optimizer}\n    - {name: m, type: test.sink}\n";
  auto edges = [](const std::string& return_edge) {
    return "    - {from: load, to: d.batch, capacity: 2}\n    - {from: d, to: acc, capacity: 2}\n"
           "    - {from: acc.token, to: d.token, capacity: 1" + return_edge + "}\n    - {from: acc.step, to: opt, capacity: 1}\n"
           "    - {from: opt.token, to: d.token, capacity: 1, token: true, initial: 1}\n    - {from: opt.record, to: m, capacity: 1}\n";
  };
  auto what = describe_error(pipeline(nodes, edges("")));
  CHECK(has(what, "test.yaml:11:7: pipeline.edges[2]: cycle d -> acc -> d passes through no token edge; a cycle is allowed "
                  "only through an edge marked 'token: true'"));
  // The same graph with the return edge marked as a token edge is accepted.
  CHECK(describe_error(pipeline(nodes, edges(", token: true"))) == "");
}

TEST_CASE("Graph.Builder.replicas_and_routers") {
  // A routed port into a single node is a router with one choice: accepted.
  CHECK(describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: r, type: test.route}\n"
                                "    - {name: w, type: test.work}\n    - {name: sink, type: test.sink}\n",
                                "    - {from: src, to: r, capacity: 2}\n    - {from: r, to: w, capacity: 2}\n"
                                "    - {from: w, to: sink, capacity: 2}\n")) == "");
  auto what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: a, type: test.work, replicas: 2}\n"
                                      "    - {name: b, type: test.work, replicas: 2}\n    - {name: sink, type: test.sink}\n",
                                      "    - {from: src, to: a, capacity: 2}\n    - {from: a, to: b, capacity: 2}\n"
                                      "    - {from: b, to: sink, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[1]: an edge between two replicated nodes ('a' x2 -> 'b' x2) is not supported"));
  what = describe_error(pipeline("    - {name: src, type: test.count, replicas: 2}\n    - {name: sink, type: test.sink}\n",
                                 "    - {from: src, to: sink, capacity: 2}\n"));
  CHECK(has(what, "test.yaml:3:7: pipeline.nodes[0].replicas: source 'src' cannot be replicated"));
  what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: r, type: test.route, replicas: 2}\n"
                                 "    - {name: sink, type: test.sink}\n",
                                 "    - {from: src, to: r, capacity: 2}\n    - {from: r, to: sink, capacity: 2}\n"));
  CHECK(has(what, "pipeline.nodes[1].replicas: router 'r' cannot be replicated"));
  what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: o, type: reorder, replicas: 2}\n"
                                 "    - {name: sink, type: test.sink}\n",
                                 "    - {from: src, to: o, capacity: 2}\n    - {from: o, to: sink, capacity: 2}\n"));
  CHECK(has(what, "node 'o' restores order on input 'in' and cannot be replicated"));
}

TEST_CASE("Graph.Builder.join_width_limit") {
  std::string nodes = "    - {name: src, type: test.count}\n    - {name: w, type: test.wide}\n";
  std::string edges = "    - {from: src, to: w, capacity: 2}\n";
  for (int i = 0; i < 10; ++i) {
    nodes += "    - {name: s" + std::to_string(i) + ", type: test.sink}\n";
    edges += "    - {from: w.o" + std::to_string(i) + ", to: s" + std::to_string(i) + ", capacity: 1}\n";
  }
  auto what = describe_error(pipeline(nodes, edges));
  CHECK(what == "test.yaml:4:7: pipeline.nodes[1]: node 'w' needs 11 join ports (1 inputs + 10 output credits); a node joins "
                "at most 10: split it into two nodes");
}

TEST_CASE("Graph.Builder.unknown_params") {
  auto what = describe_error(pipeline("    - {name: src, type: test.count, params: {cont: 3}}\n    - {name: sink, type: test.sink}\n",
                                      "    - {from: src, to: sink, capacity: 2}\n"));
  CHECK(has(what, "test.yaml:3:46: unknown key 'pipeline.nodes[0].params.cont', did you mean '"));
  CHECK(has(what, "count'?"));
  what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: o, type: reorder, params: {x: 1}}\n"
                                 "    - {name: sink, type: test.sink}\n",
                                 "    - {from: src, to: o, capacity: 2}\n    - {from: o, to: sink, capacity: 2}\n"));
  CHECK(has(what, "unknown key 'pipeline.nodes[1].params.x'"));
}

TEST_CASE("Graph.Builder.ordered_edges") {
  auto what = describe_error(pipeline("    - {name: a, type: test.count}\n    - {name: b, type: test.count}\n"
                                      "    - {name: o, type: reorder}\n    - {name: sink, type: test.sink}\n",
                                      "    - {from: a, to: o, capacity: 2}\n    - {from: b, to: o, capacity: 2}\n"
                                      "    - {from: o, to: sink, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[0]: ordered port 'o.in' takes exactly one edge"));
  // Workers that need a token besides their data have two inputs: the
  // ordered edge's credits cannot be taken at a single fan-out.
  what = describe_error(pipeline("    - {name: src, type: test.count}\n    - {name: w, type: test.hold, replicas: 2}\n"
                                 "    - {name: hub, type: pass}\n    - {name: o, type: reorder}\n    - {name: sink, type: test.sink}\n",
                                 "    - {from: src, to: w.in, capacity: 2}\n"
                                 "    - {from: w.token, to: hub, capacity: 1, token: true, initial: 1}\n"
                                 "    - {from: hub, to: w.token, capacity: 1, token: true}\n"
                                 "    - {from: w.out, to: o, capacity: 2}\n    - {from: o, to: sink, capacity: 2}\n"));
  CHECK(has(what, "pipeline.edges[3]: ordered edge 'w.out->o.in' comes from fanned-out 'w', which must have exactly one "
                  "input edge (it has 2)"));
}

TEST_CASE("Graph.Builder.describe_resolves_structure") {
  static const NodeRegistry registry = test_registry();
  GraphDescription d = describe(pipeline_from_yaml(pipeline(
                                    "    - {name: src, type: test.count}\n    - {name: r, type: test.route}\n"
                                    "    - {name: w, type: test.work, replicas: 3}\n    - {name: o, type: reorder}\n"
                                    "    - {name: sink, type: test.sink}\n",
                                    "    - {from: src, to: r, capacity: 2}\n    - {from: r, to: w, capacity: 2}\n"
                                    "    - {from: w, to: o, capacity: 4}\n    - {from: o, to: sink, capacity: 2}\n")),
                                registry);
  REQUIRE(d.edges.size() == 4);
  CHECK(d.edges[1].routed);
  CHECK(d.edges[2].ordered);
  CHECK(d.nodes[d.edges[2].credit_taker].name == "r");  // the fan-out takes the reorder's credits
  CHECK(d.nodes[3].outputs[0].type == "Number");        // reorder's "*" output resolved
  CHECK(d.nodes[1].join_ports == 3);                    // input + replica pool credit + ordered credit
  CHECK(d.nodes[2].join_ports == 1);                    // replicas put into the ordered edge without a credit
}

TEST_CASE("Graph.Registry.refuses_inconsistent_specs") {
  NodeRegistry r;
  auto make = [](NodeContext&) -> std::unique_ptr<NodeBody> { return nullptr; };
  PortSpec x_in{.name = "in", .type = "X"}, x_out{.name = "out", .type = "X"};
  auto spec = [&](std::string type, NodeKind kind, std::vector<PortSpec> in) {
    return NodeSpec{.type = type, .description = "", .kind = kind, .inputs = in, .outputs = {x_out}, .check_params = {}, .make = make};
  };
  CHECK_THROWS_WITH_AS(r.add(spec("bad.router", NodeKind::router, {x_in})),
                       "node type 'bad.router': a router has exactly one input and one routed output", std::logic_error);
  CHECK_THROWS_WITH_AS(r.add(spec("bad.source", NodeKind::source, {x_in})),
                       "node type 'bad.source': a source has no inputs", std::logic_error);
  r.add(spec("ok", NodeKind::source, {}));
  CHECK_THROWS_WITH_AS(r.add(spec("ok", NodeKind::source, {})),
                       "node type 'ok' is registered twice", std::logic_error);
}
