// Where the graph backs up, as a user sees it: a target slowed mid-run (fault
// injection) drains the edges behind it, raises one drain alarm record per
// drained edge, and the end-of-run summary names `target_forward` as the
// bound; the same run with the drafter the slowest stage raises no alarm and
// does not name the target.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "nodes/trainer.hpp"
#include "report/analysis.hpp"
#include "report/run_data.hpp"
#include "slowed.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using namespace dflow::testing;

namespace {

// Cheap drafter steps (few anchors, small batches) so that a modest delay on
// the target makes it the slowest stage by a wide margin, even on a busy machine.
std::vector<std::string> quick(std::vector<std::string> extra) {
  std::vector<std::string> o{"run.max_steps=40",          "data.tokens_per_batch=256", "train.anchors_per_sequence=4",
                             "metrics.drain_window_steps=8", "metrics.drain_horizon_steps=40", "guard.policy=none"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("Backpressure.SlowedTargetRaisesTheDrainAlarmAndIsNamedTheBottleneck") {
  const auto dir = fresh_dir("slow-target");
  const int64_t slow_from = 12;  // the queues behind the target are full by then
  const auto result = nodes::run_training(slowed(small_run_config(dir, quick({})), "target", 0.25, slow_from), {});
  REQUIRE(result.completed_steps == 40);

  // The alarm is a metrics record, raised once per edge, after the slowdown,
  // for an edge downstream of the target, with a projection.
  const auto alarms = records_of_kind(dir, "alarm");
  REQUIRE_FALSE(alarms.empty());
  std::set<std::string> edges;
  for (const auto& a : alarms) {
    CHECK(a["alarm"] == "edge_draining");
    // The target runs ahead of the drafter by the batches queued between them
    // (4 + 2 here, plus one in each node), so its slowdown shows a few
    // drafter steps before step 12's record; never earlier than that.
    CHECK(a["global_step"].get<int64_t>() >= slow_from - 8);
    CHECK(a["trend_items_per_step"].get<double>() < 0);
    CHECK(a["projected_empty_step"].is_number_integer());
    CHECK(edges.insert(a["edge"].get<std::string>()).second);  // once per edge
  }
  // The edges behind the target drain. An edge before it may drain too once
  // the delay is over and the target eats its backlog faster than a loader
  // on a busy machine refills it: that is a true alarm, not this one's test.
  const bool behind_the_target = std::any_of(edges.begin(), edges.end(), [](const std::string& edge) {
    return edge.rfind("target.out", 0) == 0 || edge.rfind("reorder.out", 0) == 0;
  });
  CHECK_MESSAGE(behind_the_target, "alarmed edges: " << nlohmann::json(edges).dump());
  CHECK(result.alarms.size() == alarms.size());

  // The console summary and the report both name the target.
  CHECK(mentions(result.findings, "`target` (target_forward) bounds throughput"));
  const auto analysis = report::analyze(report::load_run(dir));
  REQUIRE(analysis.bottleneck);
  CHECK(analysis.bottleneck->node == "target");
  CHECK(nodes::summarize(result).find("drain alarm at step") != std::string::npos);
}

TEST_CASE("Backpressure.ANormalRunRaisesNoDrainAlarm") {
  const auto dir = fresh_dir("normal-run");
  // A drafter step that takes 0.1 s more, as a real drafter's outweighs a
  // small target's forward: the drafter bounds the run by a wide margin even
  // when other processes share the machine's cores (without it, a target
  // thread starved by a busy machine can drain the edges behind it).
  const auto result = nodes::run_training(slowed(small_run_config(dir, quick({})), "drafter", 0.1), {});
  REQUIRE(result.completed_steps == 40);
  CHECK(records_of_kind(dir, "alarm").empty());  // not even as the data runs out at the end
  CHECK(result.alarms.empty());
  const auto analysis = report::analyze(report::load_run(dir));
  if (analysis.bottleneck) CHECK(analysis.bottleneck->node != "target");
  CHECK_FALSE(mentions(result.findings, "`target` (target_forward) bounds throughput"));
}
