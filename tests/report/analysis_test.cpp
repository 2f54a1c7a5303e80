// The findings in words name the node that bounds throughput and the edges
// that drain, as a person reading the report needs them.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "fixture.hpp"
#include "report/analysis.hpp"
#include "report/summary_table.hpp"

using namespace dflow::report;

namespace {
RunData run_of(const test::FixtureOptions& options, const std::string& name) {
  const auto dir = test::fresh_dir(name);
  test::write_fixture_run(dir, options);
  return load_run(dir);
}
bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}
}  // namespace

TEST_CASE("Report.Analysis.NamesTheNodeThatBoundsThroughput") {
  const Analysis a = analyze(run_of({}, "analysis-target"));
  REQUIRE(a.has_telemetry);
  REQUIRE(a.bottleneck);
  CHECK(a.bottleneck->node == "target");
  CHECK(a.bottleneck->busy_share == doctest::Approx(0.95).epsilon(0.03));
  CHECK(contains(a.bottleneck->full_inputs, "route.out->target.in"));
  CHECK(contains(a.bottleneck->starved_outputs, "target.out->reorder.in"));
  REQUIRE_FALSE(a.summary.empty());
  CHECK(a.summary[0].find("`target`") == a.summary[0].find("`"));  // the first name in the first finding
  CHECK(a.summary[0].find("bounds throughput") != std::string::npos);
  CHECK(a.summary[0].find("route.out->target.in") != std::string::npos);
  CHECK(a.summary[1].find("compute") != std::string::npos);
  CHECK(a.draining.empty());
  // The routed edge is measured per replica and summed for the declared edge.
  const auto& routed = *std::find_if(a.edges.begin(), a.edges.end(), [](const EdgeLoad& e) { return e.name == "route.out->target.in"; });
  CHECK(routed.pieces.size() == 2);
  CHECK(routed.capacity == 4);
  const auto& target = *std::find_if(a.nodes.begin(), a.nodes.end(), [](const NodeLoad& n) { return n.name == "target"; });
  CHECK(target.replica_busy_share.size() == 2);
  CHECK(a.to_json()["bottleneck"]["node"] == "target");
}

TEST_CASE("Report.Analysis.ANonComputeBoundIsCalledOut") {
  const Analysis a = analyze(run_of({.steps = 120, .total_steps = 120, .bound = "pad"}, "analysis-pad"));
  REQUIRE(a.bottleneck);
  CHECK(a.bottleneck->node == "pad");
  CHECK(contains(a.bottleneck->full_inputs, "load.out->pad.in"));
  const std::string text = bottleneck_summary(a);
  CHECK(text.find("`pad`") != std::string::npos);
  CHECK(text.find("not a compute node") != std::string::npos);
}

TEST_CASE("Report.Analysis.ABoundNodeIsReadAsItsKindDeclares") {
  // The words come from what graph.json says the kind declares
  // (graph::NodeSpec::compute, when_bound), never from its type's name: a
  // kind the report has never heard of gets them by declaring them.
  auto words = [](const test::FixtureOptions& options, const std::string& name) {
    const Analysis a = analyze(run_of(options, name));
    REQUIRE(a.bottleneck);
    CHECK(a.bottleneck->node == "target");
    return bottleneck_summary(a);
  };
  const std::string reader = words({.bound = "target", .target_type = "my.reader", .target_compute = false,
                                    .target_when_bound = "That is my reader: give it faster storage."},
                                   "analysis-declared-reader");
  CHECK(reader.find("`target` (my.reader x2) bounds throughput") != std::string::npos);
  CHECK(reader.find("That is my reader: give it faster storage.") != std::string::npos);
  CHECK(reader.find("not a compute node") == std::string::npos);

  const std::string forward = words({.bound = "target", .target_type = "my.forward"}, "analysis-declared-compute");
  CHECK(forward.find("That is compute, as the performance model expects") != std::string::npos);

  const std::string other = words({.bound = "target", .target_type = "target_forward", .target_compute = false},
                                  "analysis-declared-other");
  CHECK(other.find("That is not a compute node") != std::string::npos);  // the name alone makes nothing compute

  // A graph.json written before kinds declared it says nothing either way.
  auto old = test::default_graph(2);
  for (auto& node : old["nodes"]) {
    node.erase("compute");
    node.erase("when_bound");
  }
  RunData run = run_of({.bound = "target"}, "analysis-undeclared");
  const Analysis a = analyze(pipeline_model(old, run.last_telemetry()), run.steps);
  REQUIRE(a.bottleneck);
  CHECK(bottleneck_summary(a).find("compute") == std::string::npos);
}

TEST_CASE("Report.Analysis.ReportsDrainingEdgesWithTheStepTheyWillBeEmpty") {
  // pad.out->route.in stays full (4) to step 200, then falls 0.02 items/step: empty at step 400.
  const Analysis a = analyze(run_of({.steps = 300, .total_steps = 600, .draining_edge = "pad.out->route.in"},
                                    "analysis-drain"));
  REQUIRE(a.draining.size() == 1);
  CHECK(a.draining[0].edge == "pad.out->route.in");
  CHECK(a.draining[0].projected_empty_step == doctest::Approx(400).epsilon(0.06));
  const std::string text = bottleneck_summary(a);
  CHECK(text.find("`pad.out->route.in` is draining") != std::string::npos);
  CHECK(text.find("empty at step " + std::to_string(a.draining[0].projected_empty_step)) != std::string::npos);
}

TEST_CASE("Report.SummaryTable.AlignsOneRowPerNodeReplicaAndEdge") {
  const RunData run = run_of({.steps = 30, .total_steps = 30}, "summary-table");
  const std::string table = summary_table(*run.last_telemetry());
  for (const char* row : {"target[0]", "target[1]", "optimizer", "route.out->target[1].in", "optimizer.token->drafter.token (token)"})
    CHECK_MESSAGE(table.find(row) != std::string::npos, row);
  // Right-aligned numbers: every row of a table ends in the same column.
  std::istringstream lines(table);
  std::vector<size_t> widths;
  for (std::string line; std::getline(lines, line);)
    if (line.find("->") != std::string::npos || line.rfind("edge", 0) == 0) widths.push_back(line.size());
  REQUIRE(widths.size() == 13);
  CHECK(std::all_of(widths.begin(), widths.end(), [&](size_t w) { return w == widths[0]; }));
}

TEST_CASE("Report.Analysis.SaysHowLongEvaluationsWaitedForAThread") {
  RunData run = run_of({.steps = 30, .total_steps = 30}, "analysis-eval-wait");
  run.events.push_back({{"kind", "eval"}, {"global_step", 0}, {"time", {{"eval_s", 2.0}, {"waited_s", 1.0}}}});
  run.events.push_back({{"kind", "eval"}, {"global_step", 10}, {"time", {{"eval_s", 4.0}, {"waited_s", 5.0}}}});
  const Analysis a = analyze(run);
  REQUIRE_FALSE(a.summary.empty());
  CHECK(a.summary.back() ==
        "evaluation: 2 evaluation(s) waited 3.0 s on average for a thread after their snapshot (longest 5.0 s, step 10) "
        "and ran 3.0 s on average");
}

TEST_CASE("Report.Analysis.SaysWhetherTheExtractionOrTrainingBoundsAnEngineFilesRun") {
  // The reader of engine files reports its wait on the extraction and the
  // files ready ahead (graph telemetry's outside_wait_s, ready_ahead).
  auto words_at = [](double waited_share) {
    std::vector<nlohmann::json> steps;
    for (auto& r : test::fixture_records({.bound = "drafter", .target_type = "features.engine"})) {
      if (r.value("kind", "") != "step") continue;
      const double elapsed = r["telemetry"]["elapsed_s"];
      for (auto& n : r["telemetry"]["nodes"])
        if (n["name"] == "target") n.update({{"outside_wait_s", waited_share * elapsed}, {"outside_waits", 3}, {"ready_ahead", 7}});
      steps.push_back(r);
    }
    const auto a = analyze(pipeline_model(test::default_graph(2, "features.engine", false), &steps.back()["telemetry"]), steps);
    const auto target = *std::find_if(a.nodes.begin(), a.nodes.end(), [](const NodeLoad& n) { return n.name == "target"; });
    CHECK(target.ready_ahead == 14);  // both replicas
    return bottleneck_summary(a);
  };
  const std::string waits = words_at(0.5), flows = words_at(0.01);
  CHECK(waits.find("The extraction bounds this run, not training: `target` (features.engine x2) waited") != std::string::npos);
  CHECK(waits.find("(50% of the run)") != std::string::npos);
  CHECK(waits.find("14 sample file(s) were ready ahead of training") != std::string::npos);
  CHECK(flows.find("Training bounds this run, not the extraction") != std::string::npos);
  CHECK(flows.find("The extraction bounds") == std::string::npos);
}
