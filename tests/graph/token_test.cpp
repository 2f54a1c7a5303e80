// Invariant 1: one owner of an exclusive resource at a time. The resource is
// a token on a token edge; nodes that hold it never overlap.
#include <doctest/doctest.h>

#include "test_nodes.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

TEST_CASE("Graph.Token.training_cycle_has_one_holder") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // The default pipeline's shape: drafter, accumulate and optimizer all own
    // the parameters while they run; the token returns to the drafter from
    // accumulate (mid-step) or from the optimizer (after a step).
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: load,       type: test.count, params: {count: 400}}
    - {name: route,      type: test.route}
    - {name: target,     type: test.work, replicas: 2, params: {random_delay_us: 300, random_share: 0.3}}
    - {name: reorder,    type: reorder}
    - {name: drafter,    type: test.drafter, params: {delay_us: 50}}
    - {name: accumulate, type: test.accumulate, params: {every: 2, delay_us: 20}}
    - {name: optimizer,  type: test.optimizer, params: {delay_us: 50}}
    - {name: metrics,    type: test.sink}
  edges:
    - {from: load,             to: route,          capacity: 4}
    - {from: route,            to: target,         capacity: 2}
    - {from: target,           to: reorder,        capacity: 4}
    - {from: reorder,          to: drafter.batch,  capacity: 2}
    - {from: drafter,          to: accumulate,     capacity: 2}
    - {from: accumulate.token, to: drafter.token,  capacity: 1, token: true}
    - {from: accumulate.step,  to: optimizer,      capacity: 1}
    - {from: optimizer.token,  to: drafter.token,  capacity: 1, token: true, initial: 1}
    - {from: optimizer.record, to: metrics,        capacity: 16}
)", probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    CHECK(probe.max_holders.load() == 1);
    CHECK(probe.holds.load() == 400 + 400 + 200);  // drafter, accumulate, optimizer
    REQUIRE(probe.sink_seqs.size() == 200);          // one record per step (every 2nd micro-batch)
    for (size_t i = 0; i < probe.sink_seqs.size(); ++i) CHECK(probe.sink_seqs[i] == 2 * i + 1);
    // The token rests on its edge at the end and does not keep the run alive.
    TelemetrySnapshot t = pipeline->telemetry();
    int resting = 0;
    for (const auto& e : t.edges)
      if (e.token) resting += e.occupancy;
    CHECK(resting == 1);
  }
}

TEST_CASE("Graph.Token.contending_replicas_take_turns") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // Three workers contend for one token that a hub hands to whichever is free.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,    type: test.count, params: {count: 300}}
    - {name: worker, type: test.hold, replicas: 3, params: {delay_us: 30}}
    - {name: hub,    type: pass}
    - {name: sink,   type: test.sink}
  edges:
    - {from: src,          to: worker.in,    capacity: 2}
    - {from: worker.out,   to: sink,         capacity: 4}
    - {from: worker.token, to: hub,          capacity: 1, token: true, initial: 1}
    - {from: hub,          to: worker.token, capacity: 1, token: true}
)", probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    CHECK(probe.max_holders.load() == 1);
    CHECK(probe.holds.load() == 300);
    CHECK(probe.sink_seqs.size() == 300);
  }
}

TEST_CASE("Graph.Token.without_tokens_replicas_overlap") {
  // The probe can see an overlap, so the tests above would notice a second
  // holder: with two tokens for two workers (and two threads) both hold one
  // at once. Each worker's first call waits until the other is inside too;
  // were the workers serialized, it would fail naming the one that never came.
  Probe probe;
  auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src,    type: test.count, params: {count: 200}}
    - {name: worker, type: test.hold, replicas: 2, params: {delay_us: 30, meet: 2}}
    - {name: hub,    type: pass}
    - {name: sink,   type: test.sink}
  edges:
    - {from: src,          to: worker.in,    capacity: 2}
    - {from: worker.out,   to: sink,         capacity: 4}
    - {from: worker.token, to: hub,          capacity: 2, token: true, initial: 2}
    - {from: hub,          to: worker.token, capacity: 1, token: true}
)", probe, 2);
  REQUIRE(pipeline->run() == RunEnd::completed);
  CHECK(probe.max_holders.load() == 2);
  CHECK(probe.holds.load() == 200);
}
