// The guard in a real run: injected NaN and spikes, under each policy.
#include <doctest/doctest.h>

#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;

namespace {
config::Config with_fault(config::Config c, const std::string& kind, int64_t step, double factor = 100) {
  config::FaultDecl f;
  f.kind = kind;
  f.step = step;
  f.factor = factor;
  c.faults.push_back(f);
  return c;
}
}  // namespace

TEST_CASE("Guard.Skip.nan_at_step_30_is_skipped_and_training_continues") {
  auto dir = fresh_dir("guard-nan");
  auto config = with_fault(small_run_config(dir, {"train.epochs=2", "guard.policy=skip"}), "nan_loss", 29);
  auto result = nodes::run_training(config, {});
  auto records = step_records(dir);
  REQUIRE(records.size() == static_cast<size_t>(result.total_steps));
  const auto& bad = records[29];
  CHECK(bad["global_step"] == 30);
  CHECK(bad["guard"]["action"] == "skipped");
  CHECK(bad["guard"]["kind"] == "non_finite");
  CHECK_FALSE(bad["guard"]["sample_ids"].empty());
  for (size_t i = 30; i < records.size(); ++i) CHECK(records[i]["loss"].is_number());
  // No parameter or optimizer state is ever NaN.
  auto ckpt = train::read_checkpoint(train::resolve_checkpoint(dir / "checkpoints", "latest"));
  for (const auto& [name, t] : ckpt.drafter_tensors) CHECK_MESSAGE(torch::isfinite(t).all().item<bool>(), name);
  for (const auto& [name, t] : ckpt.optimizer_tensors) CHECK_MESSAGE(torch::isfinite(t).all().item<bool>(), name);
}

TEST_CASE("Guard.Spike.skipped_under_skip_applied_under_none") {
  auto skip_dir = fresh_dir("guard-skip"), none_dir = fresh_dir("guard-none");
  nodes::run_training(with_fault(small_run_config(skip_dir, {"run.max_steps=32", "guard.policy=skip"}), "spike", 29, 1000), {});
  nodes::run_training(with_fault(small_run_config(none_dir, {"run.max_steps=32", "guard.policy=none"}), "spike", 29, 1000), {});
  auto skip = step_records(skip_dir), none = step_records(none_dir);
  CHECK(skip[29]["guard"]["action"] == "skipped");
  CHECK(skip[29]["guard"]["kind"] == "spike");
  CHECK(none[29]["guard"]["action"] == "applied");
  // Before the spike both runs are the same run.
  for (size_t i = 0; i < 29; ++i) CHECK(skip[i] == none[i]);
}

TEST_CASE("Guard.Halt.exits_with_a_checkpoint_from_before_the_bad_step") {
  auto dir = fresh_dir("guard-halt");
  auto config = with_fault(small_run_config(dir, {"guard.policy=halt", "checkpoint.every_steps=4"}), "nan_loss", 9);
  CHECK_THROWS_WITH(nodes::run_training(config, {}), doctest::Contains("guard policy 'halt'"));
  auto latest = train::resolve_checkpoint(dir / "checkpoints", "latest");
  CHECK(latest.filename() == "step-9");  // the state after step 9, before the bad step 10
  auto ckpt = train::read_checkpoint(latest);
  for (const auto& [name, t] : ckpt.drafter_tensors) CHECK(torch::isfinite(t).all().item<bool>());
}
