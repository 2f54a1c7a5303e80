// Reading a run directory: tolerant of what a killed or resumed run leaves.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "fixture.hpp"
#include "report/page_data.hpp"
#include "report/pipeline_model.hpp"
#include "report/run_data.hpp"

using namespace dflow::report;
namespace fs = std::filesystem;

TEST_CASE("Report.LoadRun.ReadsStepsEventsCheckpointsAndGraph") {
  const fs::path dir = test::fresh_dir("load-basic");
  test::write_fixture_run(dir, {});
  const RunData run = load_run(dir);
  CHECK(run.steps.size() == 300);
  CHECK(run.steps.front()["global_step"] == 1);
  CHECK(run.steps.back()["global_step"] == 300);
  CHECK(run.checkpoint_steps == std::vector<int64_t>{100, 200, 300});
  CHECK(run.graph.is_object());
  CHECK(run.warnings.empty());
  REQUIRE(run.last_telemetry() != nullptr);
  CHECK((*run.last_telemetry())["edges"].size() == 12);  // 11 declared, the routed one per replica
}

TEST_CASE("Report.LoadRun.TruncatedLastLineIsSkippedWithAWarning") {
  const fs::path dir = test::fresh_dir("load-truncated");
  test::write_fixture_run(dir, {.steps = 20, .total_steps = 20});
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << R"({"kind": "step", "epoch": 0, "global_st)";
  const RunData run = load_run(dir);
  CHECK(run.steps.size() == 20);
  REQUIRE(run.warnings.size() == 1);
  CHECK(run.warnings[0].find("metrics.jsonl:21") != std::string::npos);
  CHECK(run.warnings[0].find("truncated") != std::string::npos);
}

TEST_CASE("Report.LoadRun.ABadLineElsewhereIsAnErrorNamingFileAndLine") {
  const fs::path dir = test::fresh_dir("load-bad-line");
  std::ofstream(dir / "metrics.jsonl") << R"({"kind": "step", "global_step": 1})" << "\n"
                                       << "{not json\n"
                                       << R"({"kind": "step", "global_step": 2})" << "\n";
  try {
    load_run(dir);
    FAIL("a bad line in the middle must be an error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("metrics.jsonl:2") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(load_run(test::fresh_dir("load-empty-dir")), doctest::Contains("metrics.jsonl"), std::runtime_error);
}

TEST_CASE("Report.LoadRun.OtherKindsAreToleratedAndAResumeSupersedesSteps") {
  const fs::path dir = test::fresh_dir("load-resume");
  std::ofstream out(dir / "metrics.jsonl");
  for (int s = 1; s <= 5; ++s) out << nlohmann::json{{"kind", "step"}, {"global_step", s}, {"loss", 1.0 * s}}.dump() << "\n";
  out << R"({"kind": "checkpoint", "global_step": 3, "path": "checkpoints/step-3"})" << "\n"
      << R"({"kind": "something_new", "detail": [1, 2]})" << "\n";
  for (int s = 4; s <= 6; ++s) out << nlohmann::json{{"kind", "step"}, {"global_step", s}, {"loss", 10.0 * s}}.dump() << "\n";
  out.close();
  const RunData run = load_run(dir);
  REQUIRE(run.steps.size() == 6);
  CHECK(run.steps[3]["loss"] == 40.0);  // the resumed run's step 4
  CHECK(run.events.size() == 2);
  CHECK(run.checkpoint_steps == std::vector<int64_t>{3});
  CHECK(run.warnings.size() == 1);
  CHECK(number_or_nan("inf") > 1e300);
  CHECK(std::isnan(number_or_nan("nan")));
}

TEST_CASE("Report.PipelineModel.FromTelemetryAloneHasTheDeclaredNodesAndEdges") {
  const fs::path dir = test::fresh_dir("load-no-graph");
  test::write_fixture_run(dir, {.steps = 10, .total_steps = 10, .write_graph = false});
  const RunData run = load_run(dir);
  CHECK(run.graph.is_null());
  const PipelineModel from_telemetry = pipeline_model(run.graph, run.last_telemetry());
  const PipelineModel declared = pipeline_model(test::default_graph(2), run.last_telemetry());
  CHECK_FALSE(from_telemetry.declared);
  CHECK(declared.declared);
  CHECK(from_telemetry.nodes.size() == declared.nodes.size());
  REQUIRE(from_telemetry.edges.size() == declared.edges.size());
  const int routed = from_telemetry.edge_index("route.out->target.in");
  REQUIRE(routed >= 0);
  CHECK(from_telemetry.edges[routed].routed);
  CHECK(from_telemetry.edges[routed].capacity == 2);
  CHECK(from_telemetry.nodes[from_telemetry.node_index("target")].replicas == 2);
  CHECK(declared_edge_name("route.out->target[1].in") == "route.out->target.in");
  CHECK(edge_ends("accumulate.token->drafter.token").to_port == "token");
}

TEST_CASE("Report.LoadRun.ALongRunKeepsTelemetryInTheTailAndEvenlyBefore") {
  const fs::path dir = test::fresh_dir("load-long");
  test::write_fixture_run(dir, {.steps = 3000, .total_steps = 3000, .checkpoint_every = 1000, .alarms = false});
  const RunData run = load_run(dir, {.telemetry_points = 100, .telemetry_tail = 60});
  REQUIRE(run.steps.size() == 3000);
  size_t with_telemetry = 0;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const bool has = run.steps[i].contains("telemetry");
    with_telemetry += has;
    if (i + 60 >= run.steps.size()) CHECK(has);
    else if (has) CHECK(run.steps[i]["global_step"].get<int>() % 32 == 0);  // 2940 steps / 100 points -> every 32nd
  }
  CHECK(with_telemetry >= 60 + 2940 / 32);
  CHECK(with_telemetry <= 60 + 2 * 100);
  CHECK(run.steps.front().contains("loss"));  // everything else stays
}

TEST_CASE("Report.LoadRun.BlankLinesAreSkippedAndNumberedRight") {
  const fs::path dir = test::fresh_dir("load-blank");
  std::ofstream(dir / "metrics.jsonl") << R"({"kind": "step", "global_step": 1})" << "\n\n"
                                       << "{bad\n\n"
                                       << R"({"kind": "step", "global_step": 2})" << "\n";
  CHECK_THROWS_WITH_AS(load_run(dir), doctest::Contains("metrics.jsonl:3:"), std::runtime_error);
  std::ofstream(dir / "metrics.jsonl") << R"({"kind": "step", "global_step": 1})" << "\n\n{bad\n\n\n";
  const RunData run = load_run(dir);
  CHECK(run.steps.size() == 1);
  REQUIRE(run.warnings.size() == 1);
  CHECK(run.warnings[0].find("metrics.jsonl:3:") != std::string::npos);
}

TEST_CASE("Report.GuardMark.RollbackAndQuarantineEventsSayWhatTheyDid") {
  nlohmann::json rollback = {{"kind", "step"},
                             {"global_step", 28},
                             {"guard",
                              {{"action", "rolled_back"},
                               {"kind", "cliff"},
                               {"reason", "loss 9 > cliff threshold 5 for 3 steps in a row"},
                               {"from_step", 28},
                               {"to_step", 20},
                               {"excluded_sample_ids", {1, 2, 3}}}}};
  auto mark = dflow::report::guard_mark(rollback);
  REQUIRE_FALSE(mark.is_null());
  const std::string label = mark["label"];
  CHECK(label.find("guard rolled_back: loss 9 > cliff threshold 5") == 0);
  CHECK(label.find("back to the state after step 20, 3 samples excluded") != std::string::npos);
  nlohmann::json quarantine = {{"kind", "step"},
                               {"global_step", 7},
                               {"guard", {{"action", "quarantined"}, {"quarantined_sample_ids", {4, 5}}}}};
  CHECK(dflow::report::guard_mark(quarantine)["label"].get<std::string>().find("2 samples quarantined") !=
        std::string::npos);
}
