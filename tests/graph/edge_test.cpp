// Invariants 2 and 3 on a single edge: bounded by its capacity, and observable.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <thread>

#include "graph/export.hpp"
#include "test_nodes.hpp"

using namespace dflow::graph;
using namespace dflow::graph::testing;

namespace {
std::string two_nodes(int count, int producer_delay_us, int consumer_delay_us, int capacity, bool consumer_gated = false) {
  return "pipeline:\n"
         "  nodes:\n"
         "    - {name: src, type: test.count, params: {count: " + std::to_string(count) + ", delay_us: " +
         std::to_string(producer_delay_us) + "}}\n"
         "    - {name: sink, type: test.sink, params: {delay_us: " + std::to_string(consumer_delay_us) +
         ", gated: " + (consumer_gated ? "true" : "false") + "}}\n"
         "  edges:\n"
         "    - {from: src, to: sink, capacity: " + std::to_string(capacity) + "}\n";
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A producer that ignored its bound would run ahead of a held consumer within
// this time. The wait decides no pass: a correct edge passes however long the
// scheduler makes it, it only gives a broken one the chance to show.
void give_a_runaway_producer_time() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }
}  // namespace

// What the bound guarantees, whatever the scheduler does: a producer never has
// more than the capacity waiting, stops there while its consumer is held, and
// every item it made arrives.
TEST_CASE("Graph.Edge.backpressure") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    // A fast producer into a slow consumer.
    Probe slow;
    auto pipeline = build(two_nodes(120, 0, 200, 4), slow, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    const EdgeStats full = pipeline->telemetry().edges[0];
    CHECK(slow.max_in_flight.load() <= 4);  // seen inside the consumer
    CHECK(full.high_water <= 4);
    CHECK(slow.emitted.load() == 120);
    CHECK(slow.consumed.load() == 120);
    CHECK(full.items_passed == 120);
    CHECK(full.occupancy == 0);

    // An edge with room for every item never holds its producer back, and
    // its consumer is measured waiting for items (at least at the end).
    Probe roomy;
    pipeline = build(two_nodes(120, 0, 0, 200), roomy, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    const EdgeStats free_flow = pipeline->telemetry().edges[0];
    CHECK(free_flow.items_passed == 120);
    CHECK(free_flow.producer_blocked_s == 0);
    CHECK(free_flow.consumer_starved_s > 0);
  }

  // The consumer takes one item and is held (on one arena thread, the other
  // runs the producer): the producer fills the edge to its capacity and stops
  // there until the consumer goes on. Needs the second thread, so 2 only.
  Probe held;
  auto pipeline = build(two_nodes(120, 0, 0, 4, /*consumer_gated=*/true), held, 2);
  auto run = std::async(std::launch::async, [&] { return pipeline->run(); });
  const auto edge = [&] { return pipeline->telemetry().edges[0]; };
  const bool filled = wait_until([&] { return held.consumed.load() == 1 && edge().occupancy >= 4; });
  CHECK_MESSAGE(filled, "the producer never filled the edge behind the held consumer: it holds " << edge().occupancy
                                                                                             << " of 4, the consumer took "
                                                                                             << held.consumed.load());
  const auto full_since = std::chrono::steady_clock::now();
  give_a_runaway_producer_time();
  CHECK(edge().occupancy == 4);
  CHECK(held.emitted.load() == 1 + 4);  // the item the consumer holds, then the capacity
  const auto opening = std::chrono::steady_clock::now();
  held.gate.open();
  REQUIRE(run.get() == RunEnd::completed);
  const EdgeStats after = edge();
  CHECK(held.consumed.load() == 120);  // items in = items out
  CHECK(after.items_passed == 120);
  CHECK(after.high_water == 4);
  CHECK(held.max_in_flight.load() <= 4);
  // Full for at least the time the test saw it full: a lower bound, not a share of the run.
  CHECK(after.producer_blocked_s >= seconds(opening - full_since));
}

TEST_CASE("Graph.Edge.waiting_consumer_stops_producer") {
  // pair needs one item on each input: while `slow` has made none, `fast`
  // fills pair.a to its capacity and stops there instead of running ahead.
  const auto yaml = [](bool slow_gated) {
    return std::string(R"(
pipeline:
  nodes:
    - {name: fast, type: test.count, params: {count: 100}}
    - {name: slow, type: test.count, params: {count: 100, delay_us: 200, gated: )") +
           (slow_gated ? "true" : "false") + R"(}}
    - {name: pair, type: test.pair}
  edges:
    - {from: fast, to: pair.a, capacity: 3}
    - {from: slow, to: pair.b, capacity: 3}
)";
  };
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Probe probe;
    auto pipeline = build(yaml(false), probe, threads);
    REQUIRE(pipeline->run() == RunEnd::completed);
    TelemetrySnapshot t = pipeline->telemetry();
    CHECK(probe.consumed.load() == 100);  // and pair checked a and b stayed in step
    CHECK(t.edges[0].items_passed == 100);
    CHECK(t.edges[1].items_passed == 100);
    CHECK(t.edges[0].high_water <= 3);
    CHECK(t.edges[1].high_water <= 3);
  }

  // `slow` held before its first item (one arena thread waits in it, the
  // other runs `fast`): 2 threads only.
  Probe probe;
  auto pipeline = build(yaml(true), probe, 2);
  auto run = std::async(std::launch::async, [&] { return pipeline->run(); });
  const auto edges = [&] { return pipeline->telemetry().edges; };
  const bool filled = wait_until([&] { return edges()[0].occupancy >= 3; });
  CHECK_MESSAGE(filled, "'fast' never filled pair.a while pair waited for pair.b: it holds " << edges()[0].occupancy << " of 3");
  give_a_runaway_producer_time();
  CHECK(edges()[0].occupancy == 3);
  CHECK(edges()[1].occupancy == 0);
  CHECK(probe.emitted.load() == 3);  // `fast` stopped at pair.a's capacity; `slow` made none yet
  CHECK(probe.consumed.load() == 0);
  probe.gate.open();
  REQUIRE(run.get() == RunEnd::completed);
  TelemetrySnapshot t = pipeline->telemetry();
  CHECK(probe.consumed.load() == 100);
  CHECK(t.edges[0].items_passed == 100);
  CHECK(t.edges[1].items_passed == 100);
  CHECK(t.edges[0].high_water == 3);
  CHECK(t.edges[1].high_water <= 3);
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
