// End-to-end: the declared graph trains a drafter, checkpoints never change
// training, and a stopped run resumes exactly.
#include <doctest/doctest.h>

#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;
using testing::small_run_config;
using testing::stopped_after;
using testing::step_records;

namespace {
double mean_loss(const std::vector<nlohmann::json>& records, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += records[i]["loss"].get<double>();
  return sum / static_cast<double>(end - begin);
}
}  // namespace

TEST_CASE("Train.Demo.loss_falls_clearly") {
  auto dir = fresh_dir("loss");
  auto result = nodes::run_training(small_run_config(dir, {"train.epochs=3"}), {});
  auto records = step_records(dir);
  REQUIRE(records.size() == static_cast<size_t>(result.total_steps));
  REQUIRE(records.size() >= 40);
  const double first = mean_loss(records, 0, 10), last = mean_loss(records, records.size() - 10, records.size());
  INFO("first 10 steps " << first << ", last 10 steps " << last);
  CHECK(last < 0.7 * first);
  // Progress fields are exact and unambiguous.
  CHECK(records.front()["global_step"] == 1);
  CHECK(records.back()["global_step"] == result.total_steps);
  CHECK(records.back()["epoch"] == 2);
  CHECK(records.back()["step_in_epoch"] == records.back()["steps_per_epoch"]);
  CHECK(records.back()["run_progress"].get<double>() == doctest::Approx(1.0));
  // The run ends with a checkpoint of its final state.
  CHECK(fs::exists(dir / "checkpoints" / ("step-" + std::to_string(result.total_steps))));
}

TEST_CASE("Train.Checkpoint.saving_never_changes_training") {
  auto plain = fresh_dir("nockpt"), saving = fresh_dir("ckpt");
  nodes::run_training(small_run_config(plain, {"run.max_steps=12"}), {});
  nodes::run_training(small_run_config(saving, {"run.max_steps=12", "checkpoint.every_steps=3", "checkpoint.keep=2"}), {});
  auto a = step_records(plain), b = step_records(saving);
  REQUIRE(a.size() == 12);
  CHECK(a == b);
  // keep=2: only the two newest remain, and latest names the newest.
  auto kept = train::list_checkpoints(saving / "checkpoints");
  REQUIRE(kept.size() == 2);
  CHECK(kept.back().filename() == "step-12");
  CHECK(train::resolve_checkpoint(saving / "checkpoints", "latest") == kept.back());
}

TEST_CASE("Train.Resume.stopped_at_40_continues_exactly") {
  auto whole = fresh_dir("whole"), split = fresh_dir("split");
  auto result = nodes::run_training(small_run_config(whole, {"train.epochs=2"}), {});
  REQUIRE(result.total_steps > 45);
  nodes::run_training(stopped_after(small_run_config(split, {"train.epochs=2"}), 40), {});
  CHECK(step_records(split).size() == 40);
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(small_run_config(split, {"train.epochs=2"}), resume);
  auto a = step_records(whole), b = step_records(split);
  REQUIRE(a.size() == b.size());
  for (size_t i = 40; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i] == b[i]);
  }
}

TEST_CASE("Train.Resume.refuses_incompatible_config_naming_keys") {
  auto dir = fresh_dir("incompat");
  nodes::run_training(small_run_config(dir, {"run.max_steps=2"}), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  CHECK_THROWS_WITH(nodes::run_training(small_run_config(dir, {"train.lr=0.1", "model.drafter.num_layers=2"}), resume),
                    doctest::Contains("train.lr: 0.02 -> 0.1"));
  // A fresh run never silently replaces saved checkpoints.
  CHECK_THROWS_WITH(nodes::run_training(small_run_config(dir), {}), doctest::Contains("--resume latest"));
}
