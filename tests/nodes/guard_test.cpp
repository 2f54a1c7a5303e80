// The guard in a real run: injected NaN and spikes, under each policy.
#include <doctest/doctest.h>

#include <set>

#include "data/dataset.hpp"
#include "data/quarantine.hpp"
#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::with_pad;

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
  CHECK(bad["guard"]["sample_ids"] == bad["sample_ids"]);
  CHECK(bad["guard"]["sample_lengths"].size() == bad["sample_ids"].size());
  CHECK_FALSE(bad["guard"]["bucket_lengths"].empty());
  // The event is also a record of its own (what `dflow report` marks).
  bool event_found = false;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line);
    if (r["kind"] == "guard" && r["global_step"] == 30) event_found = r["sample_ids"] == bad["sample_ids"];
  }
  CHECK(event_found);
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
  // Per-bucket statistics add up to the step's loss.
  for (size_t i = 0; i < 29; ++i) {
    double loss_sum = 0, weight = 0;
    for (const auto& [length, b] : skip[i]["buckets"].items()) {
      loss_sum += b["loss_sum"].get<double>();
      weight += b["loss_weight"].get<double>();
      if (skip[i]["buckets"].size() == 1) CHECK(b["grad_norm"] == skip[i]["grad_norm"]);
    }
    CHECK(loss_sum / weight == doctest::Approx(skip[i]["loss"].get<double>()));
  }
}

namespace {
// Epoch 1 plans every sample once: what its steps trained on and what they
// excluded add up to the dataset, and the excluded are the quarantined.
void check_epoch_1_accounting(const std::vector<nlohmann::json>& records, const data::SampleSet& quarantined,
                              const std::string& run) {
  const auto dataset = data::Dataset::open({(testing::assets_dir() / "data").string()});
  std::set<int64_t> trained;
  int64_t planned = 0, excluded = 0;
  for (const auto& r : records) {
    if (r["epoch"] != 1) continue;
    for (int64_t id : r["sample_ids"]) {
      CHECK_MESSAGE(!quarantined.count(id), run, ": quarantined sample ", id, " in step ", r["global_step"]);
      trained.insert(id);
    }
    planned += static_cast<int64_t>(r["sample_ids"].size()) + r["excluded_samples"].get<int64_t>();
    excluded += r["excluded_samples"].get<int64_t>();
  }
  INFO(run);
  CHECK(static_cast<int64_t>(trained.size() + quarantined.size()) == dataset.size());
  CHECK(excluded == static_cast<int64_t>(quarantined.size()));  // samples, however they are batched
  CHECK(planned == dataset.size());
}

// A spike at step 13 quarantines its samples; the run stops after step 14
// and is resumed (its loader drops them), and the same run goes on
// uninterrupted (drafter_step drops them): the same records either way.
void check_quarantine_and_resume(const std::string& pad, std::vector<std::string> common) {
  auto dir = fresh_dir("guard-quarantine-" + pad), uninterrupted_dir = fresh_dir("guard-quarantine-whole-" + pad);
  common.insert(common.end(), {"train.epochs=2", "guard.policy=quarantine", "guard.warmup_steps=8"});
  auto config = [&](const std::filesystem::path& out, std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return with_pad(small_run_config(out, extra), pad);
  };
  // Stopped after step 14 by a stop fault, so the LR schedule stays the whole run's.
  nodes::run_training(with_fault(with_fault(config(dir, {}), "spike", 12, 1000), "stop", 14), {});
  auto first = step_records(dir);
  REQUIRE(first.size() == 14);
  REQUIRE(first[12]["guard"]["action"] == "quarantined");
  CHECK(first[12]["guard"]["quarantined_sample_ids"] == first[12]["sample_ids"]);
  const auto quarantined = data::read_quarantine(dir / "quarantine.jsonl");
  for (int64_t id : first[12]["sample_ids"]) CHECK(quarantined.count(id));
  CHECK(quarantined.size() == first[12]["sample_ids"].size());
  REQUIRE(first.back()["epoch"] == 0);  // so every sample is planned again in the resumed part

  nodes::RunOptions resume;
  resume.resume = "latest";
  auto result = nodes::run_training(config(dir, {}), resume);
  auto all = step_records(dir);
  REQUIRE(all.size() == static_cast<size_t>(result.total_steps));
  check_epoch_1_accounting(all, quarantined, "resumed");

  nodes::run_training(with_fault(config(uninterrupted_dir, {}), "spike", 12, 1000), {});
  auto uninterrupted = step_records(uninterrupted_dir);
  REQUIRE(uninterrupted.size() == all.size());
  CHECK(data::read_quarantine(uninterrupted_dir / "quarantine.jsonl") == quarantined);
  check_epoch_1_accounting(uninterrupted, quarantined, "uninterrupted");
  for (size_t i = 0; i < all.size(); ++i) CHECK_MESSAGE(uninterrupted[i] == all[i], "step ", i + 1);
}
}  // namespace

TEST_CASE("Guard.Quarantine.a_quarantined_sample_is_absent_from_every_batch_of_the_resumed_run") {
  check_quarantine_and_resume("pad_bucket.token_budget", {});
}

TEST_CASE("Guard.Quarantine.packed_rows_count_and_resume_like_unpacked_ones") {
  // Several samples per row: a quarantined sample rarely empties its row,
  // and excluded_samples still counts samples, not rows.
  check_quarantine_and_resume("pad_bucket.pack", {"data.max_length=512", "data.buckets=[64, 128, 512]"});
}

TEST_CASE("Guard.Quarantine.a_rise_taken_as_the_new_level_releases_the_samples_it_quarantined") {
  // Loss x20 at steps 11-12 (a short run of spikes: quarantined for good)
  // and at steps 15-18, a rise that lasts: steps 15-17 are quarantined while
  // the verdict is open, step 18 (the 4th spike in a row) makes it the loss's
  // new level, so the samples of 15-17 were good and come back.
  auto faulted = [](config::Config c) {
    for (int64_t step : {10, 11, 14, 15, 16, 17}) c = with_fault(std::move(c), "spike", step, 20);
    return c;
  };
  const std::vector<std::string> common{"train.epochs=2", "guard.policy=quarantine", "guard.warmup_steps=8"};
  auto dir = fresh_dir("guard-release"), split_dir = fresh_dir("guard-release-split");
  auto result = nodes::run_training(faulted(small_run_config(dir, common)), {});
  auto records = step_records(dir);
  REQUIRE(records.size() == static_cast<size_t>(result.total_steps));
  REQUIRE(records[19]["epoch"] == 0);
  for (size_t i : {10, 11, 14, 15, 16}) CHECK_MESSAGE(records[i]["guard"]["action"] == "quarantined", "step ", i + 1);
  const auto& level = records[17]["guard"];
  INFO(level.dump());
  CHECK(level["action"] == "applied");
  CHECK(level["rebaselined"] == 4);
  std::vector<int64_t> pending;
  for (size_t i : {14, 15, 16})
    for (int64_t id : records[i]["sample_ids"]) pending.push_back(id);
  CHECK(level["released_sample_ids"] == nlohmann::json(pending));
  CHECK(records[18]["guard"]["action"] == "applied");

  // Only the short run's samples stay out; the released ones train in epoch 1.
  data::SampleSet kept_out;
  for (size_t i : {10, 11})
    for (int64_t id : records[i]["sample_ids"]) kept_out.insert(id);
  const auto quarantined = data::read_quarantine(dir / "quarantine.jsonl");
  CHECK(quarantined == kept_out);
  check_epoch_1_accounting(records, kept_out, "uninterrupted");

  // Stopped while the verdict is open (after step 16) and resumed: the same run.
  // (A stop fault, so that the LR schedule stays the whole run's.)
  nodes::run_training(with_fault(faulted(small_run_config(split_dir, common)), "stop", 16), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(faulted(small_run_config(split_dir, common)), resume);
  auto split = step_records(split_dir);
  REQUIRE(split.size() == records.size());
  for (size_t i = 0; i < records.size(); ++i) CHECK_MESSAGE(split[i] == records[i], "step ", i + 1);
  CHECK(data::read_quarantine(split_dir / "quarantine.jsonl") == kept_out);
}

namespace {
double mean_loss(const std::vector<nlohmann::json>& records, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += records.at(i)["loss"].get<double>();
  return sum / static_cast<double>(to - from);
}
}  // namespace

TEST_CASE("Guard.Rollback.after_a_cliff_the_loss_returns_to_its_baseline_and_the_event_names_the_samples") {
  // corrupt_weights at step index 24 scales every drafter parameter after
  // that step's update: from step 26 (1-based) on the loss stands far above
  // its baseline. Three such steps in a row are a cliff.
  const int64_t corrupt = 24;
  // The lr the damage factor was sized for (the demo's own is higher), and a
  // spike bar high enough that the echo target's rising grad norm while it
  // learns is not skipped: this test is about the cliff.
  const std::vector<std::string> common{"run.max_steps=36", "guard.snapshot_every=5", "guard.cliff_steps=3",
                                        "guard.warmup_steps=10", "train.lr=3e-3", "guard.z_threshold=20"};
  auto rollback_dir = fresh_dir("guard-rollback"), skip_dir = fresh_dir("guard-rollback-skip");
  auto with_policy = [&](const std::filesystem::path& dir, const std::string& policy) {
    auto o = common;
    o.push_back("guard.policy=" + policy);
    return with_fault(small_run_config(dir, o), "corrupt_weights", corrupt, 4.0);
  };
  nodes::run_training(with_policy(rollback_dir, "rollback"), {});
  nodes::run_training(with_policy(skip_dir, "skip"), {});
  auto records = step_records(rollback_dir), skipped = step_records(skip_dir);
  REQUIRE(records.size() == 36);

  const double baseline = mean_loss(records, corrupt - 4, corrupt + 1);  // the 5 steps before the damage shows
  CHECK(records[corrupt + 1]["loss"].get<double>() > 2 * baseline);      // the fault really damaged the weights
  const auto& event = records[corrupt + 3]["guard"];
  INFO(event.dump());
  REQUIRE(event["action"] == "rolled_back");
  CHECK(event["kind"] == "cliff");
  CHECK(event["from_step"] == corrupt + 4);
  const int64_t to_step = event["to_step"];
  CHECK(to_step <= corrupt);  // a state from before the damaging update
  CHECK(to_step % 5 == 0);
  // The excluded samples are those of every undone step, the damaging one included.
  std::set<int64_t> excluded(event["excluded_sample_ids"].begin(), event["excluded_sample_ids"].end());
  for (int64_t step = to_step + 1; step <= corrupt + 4; ++step)
    for (int64_t id : records[step - 1]["sample_ids"]) CHECK(excluded.count(id));
  CHECK(data::read_quarantine(rollback_dir / "quarantine.jsonl") == excluded);

  // After the rollback the loss is back within 15% of its pre-cliff baseline;
  // with skip alone the damaged weights stay and so does the loss.
  const double after = mean_loss(records, corrupt + 4, corrupt + 9);
  MESSAGE("pre-cliff baseline ", baseline, ", after rollback ", after, ", skip only ", mean_loss(skipped, corrupt + 4, corrupt + 9));
  CHECK(after < 1.15 * baseline);
  CHECK(mean_loss(skipped, corrupt + 4, corrupt + 9) > 2 * baseline);
  for (size_t i = corrupt + 4; i < records.size(); ++i) CHECK(records[i]["guard"]["action"] == "applied");
}

TEST_CASE("Guard.Rollback.a_run_stopped_after_a_rollback_resumes_as_if_never_stopped") {
  // corrupt_weights after the updates of steps 25 and 30 (1-based): each
  // shows as a cliff three steps later, at steps 28 and 33, and both roll
  // back to the good snapshot after step 20. The split run stops after step
  // 30, between the two, so its resumed part must roll back to a snapshot
  // the first part kept, undo steps that part took (29 and 30) and exclude
  // their samples.
  const std::vector<std::string> common{"run.max_steps=38",       "guard.policy=rollback", "guard.snapshot_every=5",
                                        "guard.cliff_steps=3",    "guard.warmup_steps=10", "train.lr=3e-3",
                                        "guard.z_threshold=20"};
  auto faulted = [&](const std::filesystem::path& dir) {
    return with_fault(with_fault(small_run_config(dir, common), "corrupt_weights", 24, 4.0), "corrupt_weights", 29, 4.0);
  };
  auto whole_dir = fresh_dir("guard-rollback-whole"), split_dir = fresh_dir("guard-rollback-split");
  nodes::run_training(faulted(whole_dir), {});
  auto whole = step_records(whole_dir);
  REQUIRE(whole.size() == 38);
  for (int64_t cliff : {28, 33}) {
    const auto& event = whole[cliff - 1]["guard"];
    INFO("step ", cliff, ": ", event.dump());
    REQUIRE(event["action"] == "rolled_back");
    CHECK(event["to_step"] == 20);
  }
  CHECK(whole[32]["guard"]["undone_steps"] == nlohmann::json({29, 30, 31, 32, 33}));

  nodes::run_training(testing::stopped_after(faulted(split_dir), 30), {});
  REQUIRE(step_records(split_dir).size() == 30);
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(faulted(split_dir), resume);
  auto split = step_records(split_dir);
  REQUIRE(split.size() == whole.size());
  for (size_t i = 0; i < whole.size(); ++i) CHECK_MESSAGE(split[i] == whole[i], "step ", i + 1);
  CHECK(data::read_quarantine(split_dir / "quarantine.jsonl") == data::read_quarantine(whole_dir / "quarantine.jsonl"));
}

TEST_CASE("Guard.Rollback.halts_with_a_good_checkpoint_when_rollbacks_are_used_up") {
  auto dir = fresh_dir("guard-rollback-halt");
  auto config = with_fault(small_run_config(dir, {"run.max_steps=36", "guard.policy=rollback", "guard.snapshot_every=5",
                                                  "guard.cliff_steps=3", "guard.warmup_steps=10", "train.lr=3e-3",
                                                  "guard.max_rollbacks=0"}),
                           "corrupt_weights", 24, 4.0);
  CHECK_THROWS_WITH(nodes::run_training(config, {}), doctest::Contains("after 0 rollback(s) (guard.max_rollbacks)"));
  auto ckpt = train::read_checkpoint(train::resolve_checkpoint(dir / "checkpoints", "latest"));
  CHECK(ckpt.global_step == 27);  // the steps taken before the halting one
  CHECK(ckpt.run_state["guard"]["rollbacks"] == 0);
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
