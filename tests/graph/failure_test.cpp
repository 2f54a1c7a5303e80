// Invariant 8: a failure is clean. An exception in any node ends run() with
// an error naming the node (and replica) and the message seq, at once, with
// no thread left running user code; a stalled graph says so instead of hanging.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "test_nodes.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

TEST_CASE("Graph.Failure.middle_node_exception") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // Without the failure this would run for minutes.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,  type: test.count, params: {count: 100000000}}
    - {name: a,    type: test.work, params: {delay_us: 100}}
    - {name: boom, type: test.work, params: {fail_at: 17}}
    - {name: sink, type: test.sink, params: {delay_us: 200}}
  edges:
    - {from: src,  to: a,    capacity: 4}
    - {from: a,    to: boom, capacity: 4}
    - {from: boom, to: sink, capacity: 4}
)", probe, threads);
    std::string what;
    try {
      pipeline->run();
    } catch (const NodeError& e) {
      what = e.what();
      CHECK(e.node() == "boom");
      CHECK(e.seq() == 17);
      CHECK(e.cause() == "test failure at seq 17");
    }
    CHECK(what == "node 'boom' failed on message seq 17: test failure at seq 17");
    CHECK(probe.running.load() == 0);  // no body is still running
    CHECK(pipeline->is_cancelled());
    CHECK(pipeline->stop_token().stop_requested());
    TelemetrySnapshot t = pipeline->telemetry();
    CHECK(t.nodes[2].errors == 1);
    // The run stopped at the failure: the source got no further ahead of
    // seq 17 than the bounds let it (src->a and a->boom hold 4 each, a and the
    // source one each in flight), instead of on towards its 100 million.
    CHECK(t.nodes[0].calls <= 18 + 4 + 1 + 4 + 1);
    // Nothing runs after run() returned.
    auto calls = t.nodes[0].calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(pipeline->telemetry().nodes[0].calls == calls);
  }
}

TEST_CASE("Graph.Failure.replica_exception_names_replica") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,     type: test.count, params: {count: 1000}}
    - {name: route,   type: test.route, params: {policy: round_robin}}
    - {name: target,  type: test.work, replicas: 3, params: {fail_at: 40, delay_us: 50}}
    - {name: reorder, type: reorder}
    - {name: sink,    type: test.sink}
  edges:
    - {from: src,     to: route,   capacity: 4}
    - {from: route,   to: target,  capacity: 2}
    - {from: target,  to: reorder, capacity: 4}
    - {from: reorder, to: sink,    capacity: 4}
)", probe, threads);
    // Which replica gets seq 40 depends on timing (a full replica is skipped); the error names it.
    std::string what;
    try {
      pipeline->run();
    } catch (const NodeError& e) {
      what = e.what();
      CHECK(e.node() == "target");
      CHECK(e.seq() == 40);
    }
    CHECK(what.find("node 'target' (replica ") == 0);
    CHECK(what.find(") failed on message seq 40: test failure at seq 40") != std::string::npos);
    CHECK(probe.running.load() == 0);
  }
}

TEST_CASE("Graph.Failure.a_factory_that_throws_fails_the_build_naming_the_node") {
  // Nodes before and after it are already built and wired when it throws:
  // the half-built graph must come apart cleanly, for 1 and 2 threads.
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    std::string what;
    try {
      build(R"(
pipeline:
  nodes:
    - {name: src,  type: test.count, params: {count: 10}}
    - {name: a,    type: test.work}
    - {name: boom, type: test.work, params: {fail_to_build: true}}
    - {name: sink, type: test.sink}
  edges:
    - {from: src,  to: a,    capacity: 4}
    - {from: a,    to: boom, capacity: 4}
    - {from: boom, to: sink, capacity: 4}
)", probe, threads);
    } catch (const std::exception& e) {
      what = e.what();
    }
    CHECK(what == "node 'boom' (test.work) could not be built: cannot build (fail_to_build)");
    CHECK(probe.emitted.load() == 0);
  }
}

TEST_CASE("Graph.Failure.cancel_from_another_thread") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,  type: test.count, params: {count: 100000000, delay_us: 100}}
    - {name: sink, type: test.sink}
  edges:
    - {from: src, to: sink, capacity: 4}
)", probe, threads);
    // Cancels once items flow (however long the scheduler takes to start
    // them), noting how many source calls had finished by then.
    bool flowed = false;
    uint64_t source_calls_at_cancel = 0;
    std::thread canceller([&] {
      flowed = wait_until([&] { return probe.consumed.load() > 0; });
      source_calls_at_cancel = pipeline->telemetry().nodes[0].calls;
      pipeline->cancel();
    });
    RunEnd end = pipeline->run();
    canceller.join();
    CHECK_MESSAGE(flowed, "no item reached the sink before the canceller gave up");
    CHECK(end == RunEnd::cancelled);
    CHECK(probe.running.load() == 0);
    CHECK(probe.consumed.load() > 0);
    // No source call started after cancel(): at most the one in flight then finished.
    CHECK(pipeline->telemetry().nodes[0].calls <= source_calls_at_cancel + 1);
    CHECK_THROWS_AS(pipeline->run(), std::logic_error);  // a pipeline runs once
  }
}

TEST_CASE("Graph.Failure.stall_is_reported") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // A token cycle without its initial token: the drafter can never fire.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: load,       type: test.count, params: {count: 10}}
    - {name: drafter,    type: test.drafter}
    - {name: accumulate, type: test.accumulate}
    - {name: optimizer,  type: test.optimizer}
    - {name: metrics,    type: test.sink}
  edges:
    - {from: load,             to: drafter.batch, capacity: 2}
    - {from: drafter,          to: accumulate,    capacity: 2}
    - {from: accumulate.token, to: drafter.token, capacity: 1, token: true}
    - {from: accumulate.step,  to: optimizer,     capacity: 1}
    - {from: optimizer.token,  to: drafter.token, capacity: 1, token: true}
    - {from: optimizer.record, to: metrics,       capacity: 4}
)", probe, threads);
    std::string what;
    try {
      pipeline->run();
    } catch (const StallError& e) {
      what = e.what();
    }
    CHECK(what.find("graph stalled") == 0);
    CHECK(what.find("source 'load' is not exhausted") != std::string::npos);
    CHECK(what.find("'load.out->drafter.batch' holds 2 of 2") != std::string::npos);
  }
}

TEST_CASE("Graph.Failure.replica_silent_on_ordered_edge") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // The reorder waits for every seq: a replica that drops one is an error,
    // not a hang.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,     type: test.count, params: {count: 100}}
    - {name: route,   type: test.route}
    - {name: target,  type: test.work, replicas: 2, params: {silent_at: 5}}
    - {name: reorder, type: reorder}
    - {name: sink,    type: test.sink}
  edges:
    - {from: src,     to: route,   capacity: 4}
    - {from: route,   to: target,  capacity: 2}
    - {from: target,  to: reorder, capacity: 4}
    - {from: reorder, to: sink,    capacity: 4}
)", probe, threads);
    std::string what;
    try {
      pipeline->run();
    } catch (const NodeError& e) {
      what = e.what();
    }
    CHECK(what.find("failed on message seq 5: emitted nothing on 'out', which feeds ordered edge 'target.out->reorder.in'") !=
          std::string::npos);
  }
}

TEST_CASE("Graph.Failure.gap_in_ordered_sequence") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // No fan-out: the producer of the ordered edge takes its credits itself
    // and must deliver consecutive seqs (a gap would make the reorder wait).
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,     type: test.count, params: {count: 100, first_seq: 5}}
    - {name: filter,  type: test.work, params: {silent_at: 8}}
    - {name: reorder, type: reorder}
    - {name: sink,    type: test.sink}
  edges:
    - {from: src,     to: filter,  capacity: 4}
    - {from: filter,  to: reorder, capacity: 4}
    - {from: reorder, to: sink,    capacity: 4}
)", probe, threads);
    std::string what;
    try {
      pipeline->run();
    } catch (const NodeError& e) {
      what = e.what();
    }
    CHECK(what == "node 'filter' failed on message seq 9: ordered edge 'filter.out->reorder.in' needs consecutive sequence "
                  "numbers; got seq 9 after 7");
    // What reached the sink before the cancel is in order and has no gap.
    CHECK(probe.sink_seqs.size() <= 3);
    for (size_t i = 0; i < probe.sink_seqs.size(); ++i) CHECK(probe.sink_seqs[i] == 5 + i);
  }
}

TEST_CASE("Graph.Message.payload_type_mismatch") {
  Message m = make_message(3, 0, std::string("text"));
  CHECK(payload<std::string>(m) == "text");
  std::string what;
  try {
    (void)payload<uint64_t>(m);
  } catch (const std::logic_error& e) {
    what = e.what();
  }
  CHECK(what.find("message seq 3 carries 'std::__cxx11::basic_string") == 0);
  CHECK(what.find("but 'unsigned long' was expected") != std::string::npos);
}
