// Many messages through replicas, routers and a reorder: none lost, none
// duplicated, and sequence order restored after the parallel replicas.
#include <doctest/doctest.h>

#include <chrono>

#include "test_nodes.hpp"
#include "time_scale.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

namespace {
// src -> pre -> route => work xW -> reorder -> post -> sink
std::string fan_out_and_reorder(int count, int replicas, const std::string& policy, int random_delay_us, double random_share,
                                int first_seq = 0) {
  return "pipeline:\n"
         "  nodes:\n"
         "    - {name: src, type: test.count, params: {count: " + std::to_string(count) + ", first_seq: " + std::to_string(first_seq) + "}}\n"
         "    - {name: pre, type: test.work}\n"
         "    - {name: route, type: test.route, params: {policy: " + policy + "}}\n"
         "    - {name: work, type: test.work, replicas: " + std::to_string(replicas) + ", params: {random_delay_us: " +
         std::to_string(random_delay_us) + ", random_share: " + std::to_string(random_share) + ", seed: 7}}\n"
         "    - {name: reorder, type: reorder}\n"
         "    - {name: post, type: test.work}\n"
         "    - {name: sink, type: test.sink}\n"
         "  edges:\n"
         "    - {from: src, to: pre, capacity: 8}\n"
         "    - {from: pre, to: route, capacity: 4}\n"
         "    - {from: route, to: work, capacity: 2}\n"
         "    - {from: work, to: reorder, capacity: 6}\n"
         "    - {from: reorder, to: post, capacity: 4}\n"
         "    - {from: post, to: sink, capacity: 4}\n";
}

void check_in_order(const Probe& probe, uint64_t first_seq, uint64_t count) {
  REQUIRE(probe.sink_seqs.size() == count);  // none lost, none duplicated (given the order below)
  bool in_order = true;
  for (uint64_t i = 0; i < count; ++i) in_order = in_order && probe.sink_seqs[i] == first_seq + i;
  CHECK(in_order);
}
}  // namespace

TEST_CASE("Graph.Flow.100k_none_lost_in_order") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto started = std::chrono::steady_clock::now();
    // Round robin, so that every replica works even with one thread (least
    // loaded would find replica 0 idle every time: depth-first schedule).
    // 100k messages; a tenth under sanitizers, whose per-message cost is 15x.
    const int count = dflow::testing::time_scale() > 1.0 ? 10000 : 100000;
    auto pipeline = build(fan_out_and_reorder(count, 3, "round_robin", 100, 0.003), probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    MESSAGE(count << " messages, " << threads << " thread(s): "
                              << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() << " s");
    check_in_order(probe, 0, count);
    REQUIRE(probe.calls["work"].size() == 3);
    for (int r = 0; r < 3; ++r) CHECK(probe.calls["work"][r] > count / 5);
    CHECK(probe.calls["work"][0] + probe.calls["work"][1] + probe.calls["work"][2] == count);
    TelemetrySnapshot t = pipeline->telemetry();
    for (const auto& e : t.edges) {
      CAPTURE(e.name);
      CHECK(e.occupancy == 0);
      CHECK(e.high_water <= e.capacity);
    }
  }
}

TEST_CASE("Graph.Reorder.three_replicas_random_delays") {
  for (int threads : {1, 2}) {
    for (const char* policy : {"least_loaded", "round_robin"}) {
      CAPTURE(threads);
      CAPTURE(policy);
      // A fifth of the messages wait up to 400 us in a replica: later seqs
      // overtake them and must wait in the reorder, which never deadlocks
      // because its credits were taken at the router.
      Probe probe;
      auto pipeline = build(fan_out_and_reorder(2000, 3, policy, 400, 0.2), probe, threads);
      REQUIRE(pipeline->run() == RunEnd::completed);
      check_in_order(probe, 0, 2000);
      TelemetrySnapshot t = pipeline->telemetry();
      for (const auto& e : t.edges) {
        CAPTURE(e.name);
        CHECK(e.high_water <= e.capacity);
        if (e.name == "work.out->reorder.in") CHECK(e.items_passed == 2000);
      }
    }
  }
}

TEST_CASE("Graph.Reorder.starts_at_any_seq") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // A resumed run starts at its plan cursor, not at 0.
    Probe probe;
    auto pipeline = build(fan_out_and_reorder(500, 2, "least_loaded", 200, 0.2, 1000), probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    check_in_order(probe, 1000, 500);
  }
}

TEST_CASE("Graph.Router.replica_edges_named_and_bounded") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // Without a reorder: replica edges are named per replica and the router
    // sees each one's outstanding cost. With two threads both replicas work at
    // once: each one's first call waits until the other is inside too (the
    // router sends the second item to the idle replica), so a router that fed
    // one replica only, or replicas run one at a time, fail naming the absent one.
    Probe probe;
    auto pipeline = build(std::string(R"(
pipeline:
  nodes:
    - {name: src, type: test.count, params: {count: 300}}
    - {name: route, type: test.route}
    - {name: work, type: test.work, replicas: 2, params: {delay_us: 100, meet: )") + (threads > 1 ? "2" : "0") + R"(}}
    - {name: sink, type: test.sink}
  edges:
    - {from: src, to: route, capacity: 4}
    - {from: route, to: work, capacity: 2}
    - {from: work, to: sink, capacity: 4}
)", probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    CHECK(probe.sink_seqs.size() == 300);
    TelemetrySnapshot t = pipeline->telemetry();
    std::vector<std::string> names;
    for (const auto& e : t.edges) names.push_back(e.name);
    CHECK(names == std::vector<std::string>{"src.out->route.in", "route.out->work[0].in", "route.out->work[1].in", "work.out->sink.in"});
    CHECK(t.edges[1].items_passed + t.edges[2].items_passed == 300);
    CHECK(t.edges[1].high_water <= 2);
    CHECK(t.edges[2].high_water <= 2);
    REQUIRE(t.nodes.size() == 5);  // src, route, work[0], work[1], sink
    CHECK(t.nodes[2].replica == 0);
    CHECK(t.nodes[3].replica == 1);
    CHECK(t.nodes[2].calls + t.nodes[3].calls == 300);
    if (threads > 1) {  // both replicas met inside their bodies
      CHECK(t.nodes[2].calls >= 1);
      CHECK(t.nodes[3].calls >= 1);
    }
  }
}

TEST_CASE("Graph.Flow.shared_edge_feeds_free_replica") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // No router: a plain edge into replicas is one queue that whichever
    // replica is free takes from; its capacity is per replica.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: src, type: test.count, params: {count: 1000}}
    - {name: work, type: test.work, replicas: 3}
    - {name: sink, type: test.sink}
  edges:
    - {from: src, to: work, capacity: 2}
    - {from: work, to: sink, capacity: 4}
)", probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    CHECK(probe.sink_seqs.size() == 1000);
    TelemetrySnapshot t = pipeline->telemetry();
    CHECK(t.edges[0].capacity == 6);
    CHECK(t.edges[0].high_water <= 6);
  }
}
