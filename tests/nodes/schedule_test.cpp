// The LR schedule spans the run a user asked for: run.max_steps, when it ends
// the run before the last epoch, sizes it (warmup and decay fit in the run,
// as in other trainers); the schedule is fixed when the run starts, so a
// resume continues it exactly or is refused.
#include <doctest/doctest.h>

#include "config/errors.hpp"
#include "nodes/trainer.hpp"
#include "report/page_data.hpp"
#include "train/schedule.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::stopped_after;
using testing::step_records;

namespace {

train::Schedule schedule_of(const config::Config& config, int64_t steps) {
  train::Schedule s;
  s.peak_lr = config.train.lr;
  s.total_steps = steps;
  s.warmup_ratio = config.train.warmup_ratio;
  s.kind = config.train.schedule;
  return s;
}

}  // namespace

TEST_CASE("Train.Schedule.run_max_steps_sizes_the_schedule_so_a_short_run_decays_fully") {
  for (const std::string kind : {"cosine", "linear"}) {
    CAPTURE(kind);
    auto dir = fresh_dir("schedule-short-" + kind);
    const auto config = small_run_config(dir, {"run.max_steps=8", "train.warmup_ratio=0.25", "train.schedule=" + kind});
    nodes::run_training(config, {});
    const auto records = step_records(dir);
    REQUIRE(records.size() == 8);
    const auto expected = schedule_of(config, 8);
    for (size_t i = 0; i < records.size(); ++i) {
      CAPTURE(i);
      CHECK(records[i]["lr"].get<double>() == doctest::Approx(expected.lr_at(static_cast<int64_t>(i))));
    }
    CHECK(records[1]["lr"].get<double>() == doctest::Approx(config.train.lr));  // warmup: 2 of 8 steps
    CHECK(records.back()["lr"].get<double>() < 0.2 * config.train.lr);          // decayed, not still near the peak
  }
}

TEST_CASE("Train.Schedule.a_run_that_max_steps_ends_counts_its_progress_to_that_end") {
  // The run ends at run.max_steps: its records, the console line and the
  // report's header ("4 / 4, 100% of the run") count to there, not to the
  // epochs' steps it never runs.
  auto dir = fresh_dir("schedule-short-progress");
  const auto result = nodes::run_training(small_run_config(dir, {"run.max_steps=4"}), {});
  REQUIRE(result.total_steps > 8);  // the epochs would run longer
  const auto records = step_records(dir);
  REQUIRE(records.size() == 4);
  CHECK(records[1]["total_steps"] == 4);
  CHECK(records[1]["run_progress"].get<double>() == doctest::Approx(0.5));
  CHECK(records.back()["run_progress"].get<double>() == doctest::Approx(1.0));
  report::RecordSlimmer page;
  CHECK(page.slim(records.back())["tot"] == 4);  // the report header's total
  const std::string summary = nodes::summarize(result);  // the end-of-run line
  CHECK_MESSAGE(summary.rfind("trained 4/4 steps (run.max_steps; train.epochs hold " +
                                  std::to_string(result.total_steps) + ")", 0) == 0,
                summary);
}

TEST_CASE("Train.Schedule.a_resume_continues_the_schedule_the_run_started_with") {
  // Stopped at step 3 of the whole run (a stop fault: the schedule is the
  // run's), resumed with run.max_steps 6: steps 4..6 follow the whole run's schedule.
  auto dir = fresh_dir("schedule-resume");
  nodes::run_training(stopped_after(small_run_config(dir), 3), {});
  REQUIRE(step_records(dir).size() == 3);
  nodes::RunOptions resume;
  resume.resume = "latest";
  const auto config = small_run_config(dir, {"run.max_steps=6"});
  auto result = nodes::run_training(config, resume);
  CHECK(result.completed_steps == 6);
  const auto records = step_records(dir);
  REQUIRE(records.size() == 6);
  const auto whole = schedule_of(config, result.total_steps);
  for (size_t i = 0; i < records.size(); ++i) {
    CAPTURE(i);
    CHECK(records[i]["lr"].get<double>() == doctest::Approx(whole.lr_at(static_cast<int64_t>(i))));
  }

  // A run whose schedule ended at step 3 cannot go on to step 6 at lr 0: refused as a config error.
  auto short_dir = fresh_dir("schedule-resume-short");
  nodes::run_training(small_run_config(short_dir, {"run.max_steps=3"}), {});
  bool refused = false;
  try {
    nodes::run_training(small_run_config(short_dir, {"run.max_steps=6"}), resume);
  } catch (const ConfigError& e) {
    refused = true;
    CHECK(std::string(e.what()).find("LR schedule ends at step 3 (set by run.max_steps when the run started)") !=
          std::string::npos);
  }
  CHECK(refused);
}
