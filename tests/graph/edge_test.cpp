// Invariants 2 and 3 on a single edge: bounded by its capacity, and observable.
#include <doctest/doctest.h>

#include "graph/export.hpp"
#include "test_nodes.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

namespace {
std::string two_nodes(int count, int producer_delay_us, int consumer_delay_us, int capacity) {
  return "pipeline:\n"
         "  nodes:\n"
         "    - {name: src, type: test.count, params: {count: " + std::to_string(count) + ", delay_us: " +
         std::to_string(producer_delay_us) + "}}\n"
         "    - {name: sink, type: test.sink, params: {delay_us: " + std::to_string(consumer_delay_us) + "}}\n"
         "  edges:\n"
         "    - {from: src, to: sink, capacity: " + std::to_string(capacity) + "}\n";
}
}  // namespace

// With one arena thread a "slow" body holds the only thread, so no producer
// can run ahead of it: the edge-full and edge-empty times only mean something
// with two threads. Capacity and completeness are checked at both.
TEST_CASE("Graph.Edge.backpressure") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // A fast producer into a slow consumer: the edge fills and stays full.
    Probe slow;
    auto pipeline = build(two_nodes(120, 0, 1000, 4), slow, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    TelemetrySnapshot blocked = pipeline->telemetry();
    const EdgeStats& full = blocked.edges[0];
    CHECK(slow.max_in_flight.load() <= 4);  // seen inside the consumer
    CHECK(full.high_water <= 4);
    CHECK(full.items_passed == 120);
    CHECK(full.occupancy == 0);
    if (threads > 1) {
      CHECK(full.high_water == 4);
      CHECK(full.producer_blocked_s > 0.5 * blocked.elapsed_s);
      CHECK(full.mean_occupancy > 2.0);
    }

    // A slow producer into a fast consumer is never held back.
    Probe fast;
    pipeline = build(two_nodes(120, 1000, 0, 4), fast, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    TelemetrySnapshot free_flow = pipeline->telemetry();
    const EdgeStats& empty = free_flow.edges[0];
    CHECK(empty.items_passed == 120);
    CHECK(empty.high_water <= 4);
    CHECK(empty.producer_blocked_s < 0.1 * free_flow.elapsed_s);
    CHECK(empty.consumer_starved_s > 0.5 * free_flow.elapsed_s);
    if (threads > 1) CHECK(empty.producer_blocked_s < 0.2 * full.producer_blocked_s);
  }
}

TEST_CASE("Graph.Edge.waiting_consumer_stops_producer") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // pair needs one item on each input; b is slow, so a fills up and `fast`
    // stops at a's capacity instead of running ahead.
    Probe probe;
    auto pipeline = build(R"(
pipeline:
  nodes:
    - {name: fast, type: test.count, params: {count: 100}}
    - {name: slow, type: test.count, params: {count: 100, delay_us: 500}}
    - {name: pair, type: test.pair}
  edges:
    - {from: fast, to: pair.a, capacity: 3}
    - {from: slow, to: pair.b, capacity: 3}
)", probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    TelemetrySnapshot t = pipeline->telemetry();
    const EdgeStats& a = t.edges[0];
    const EdgeStats& b = t.edges[1];
    CHECK(probe.consumed.load() == 100);  // and pair checked a and b stayed in step
    CHECK(a.items_passed == 100);
    CHECK(b.items_passed == 100);
    CHECK(a.high_water <= 3);
    CHECK(b.high_water <= 3);
    if (threads > 1) {
      CHECK(a.high_water == 3);
      CHECK(a.producer_blocked_s > 0.5 * t.elapsed_s);
      CHECK(b.producer_blocked_s < 0.2 * a.producer_blocked_s);
    }
  }
}

TEST_CASE("Graph.Edge.capacity_one_still_flows") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto pipeline = build(two_nodes(2000, 0, 0, 1), probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    CHECK(probe.consumed.load() == 2000);
    CHECK(probe.max_in_flight.load() <= 1);
    CHECK(pipeline->telemetry().edges[0].high_water == 1);
  }
}

TEST_CASE("Graph.Telemetry.nodes_and_json") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto pipeline = build(two_nodes(50, 0, 200, 2), probe, threads);
    CHECK(pipeline->telemetry().elapsed_s == 0);  // nothing measured before run
    REQUIRE(pipeline->run() == RunEnd::completed);
    TelemetrySnapshot t = pipeline->telemetry();
    REQUIRE(t.nodes.size() == 2);
    const NodeStats& sink = t.nodes[1];
    CHECK(sink.name == "sink");
    CHECK(sink.calls == 50);
    CHECK(sink.busy_s >= 50 * 200e-6);
    CHECK(sink.max_s >= 200e-6);
    CHECK(sink.errors == 0);
    CHECK(t.nodes[0].calls == 50);  // the source's last call emits and reports the end
    auto json = to_json(t);
    CHECK(json["edges"][0]["name"] == "src.out->sink.in");
    CHECK(json["edges"][0]["items_passed"] == 50);
    CHECK(json["nodes"][1]["calls"] == 50);
    CHECK(json["edges"][0].contains("producer_blocked_s"));
    CHECK(json["edges"][0].contains("consumer_starved_s"));
    CHECK(json["edges"][0].contains("mean_occupancy"));
  }
}
