// The pieces of the nodes' state design on their own: progress, step totals,
// the model token's single owner, and the resume compatibility check over
// every key that changes what a run computes (the pipeline's batching too).
#include <doctest/doctest.h>

#include "nodes/model_token.hpp"
#include "nodes/progress.hpp"
#include "nodes/step_totals.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using namespace dflow::testing;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("State.Progress.round_trips_and_names_its_cadences") {
  nodes::Progress p;
  CHECK(p.due(20));  // the state before the first step is on every cadence
  // Step 5 (0-based) of epoch 1, the epoch's last of 6 steps, 4 batches a step.
  p.complete_step(nodes::StepPosition{1, 5, 6, 11, 3, 4}, 4);
  CHECK(p.completed_steps == 12);
  CHECK(p.cursor == data::PlanCursor{2, 0});  // the next epoch's first batch
  p.complete_step(nodes::StepPosition{2, 0, 6, 12, 3, 4}, 4);
  CHECK(p.cursor == data::PlanCursor{2, 4});
  CHECK(p.due(13));
  CHECK_FALSE(p.due(5));
  CHECK_FALSE(p.due(0));  // 0: never
  const auto back = nodes::Progress::from_json(p.to_json());
  CHECK(back.completed_steps == 13);
  CHECK(back.cursor == p.cursor);
  CHECK_THROWS_WITH(nodes::Progress::from_json({{"epoch", 1}}), doctest::Contains("global_step"));
}

TEST_CASE("State.StepTotals.every_summed_field_adds_and_survives_packing") {
  auto a = nodes::StepTotals::zeros(4, 2, 1, 1), b = nodes::StepTotals::zeros(4, 2, 1, 1);
  a.weighted_ce_sum = 1.5, a.weight_sum = 2, a.anchors = 3, a.real_tokens = 100, a.padded_tokens = 128;
  a.micro_batches = 1, a.excluded_samples = 1, a.correct_per_position = {0, 1, 2, 3};
  a.count_per_position = {4, 4, 4, 4}, a.batches_per_bucket = {1, 0}, a.bucket_ce_sum = {1.5, 0};
  a.bucket_weight_sum = {2, 0}, a.bucket_real_tokens = {100, 0}, a.sample_ids = {7, 9}, a.sample_lengths = {50, 50};
  a.main_loss_sum = 1.25, a.term_loss_sums = {0.25}, a.accept_rate_per_position = {0, 1, 1, 2};
  a.term_series_per_position = {0, 2, 1, 1};
  b = a;
  b.sample_ids = {11};
  b.sample_lengths = {60};
  a.add(b);
  CHECK(a.weighted_ce_sum == 3.0);
  CHECK(a.real_tokens == 200);
  CHECK(a.excluded_samples == 2);
  CHECK(a.count_per_position == std::vector<double>{8, 8, 8, 8});
  CHECK(a.bucket_real_tokens == std::vector<int64_t>{200, 0});
  CHECK(a.term_loss_sums == std::vector<double>{0.5});
  CHECK(a.term_series_per_position == std::vector<double>{0, 4, 2, 2});
  CHECK(a.accept_rate_per_position == std::vector<double>{0, 2, 2, 4});
  CHECK(a.sample_ids == std::vector<int64_t>{7, 9, 11});  // concatenated, not summed

  std::vector<double> packed;
  a.pack_into(packed);
  CHECK(packed.size() == 8 + 1 + 4 * 4 + 4 * 2);  // 8 scalars, 1 term, 4 per-position (1 a term's), 4 per-bucket
  auto c = nodes::StepTotals::zeros(4, 2, 1, 1);
  CHECK(c.unpack_from(packed, 0) == packed.size());
  std::vector<double> again;
  c.pack_into(again);
  CHECK(again == packed);
  CHECK_THROWS(nodes::StepTotals::zeros(5, 2, 1, 1).unpack_from(packed, 0));
}

TEST_CASE("State.ModelToken.a_second_initial_token_is_refused_naming_the_node") {
  auto config = small_run_config(fresh_dir("two-tokens"), {"run.max_steps=2"});
  for (auto& e : config.pipeline.edges)
    if (e.initial > 0) e.initial = 2, e.capacity = 2;
  const std::string error = error_of([&] { nodes::run_training(config, {}); });
  CHECK(error.find("second model token") != std::string::npos);
  CHECK(error.find("'drafter'") != std::string::npos);
}

TEST_CASE("State.Resume.refuses_every_key_that_changes_what_is_computed") {
  auto dir = fresh_dir("compat");
  nodes::run_training(stopped_after(small_run_config(dir), 2), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  const std::vector<std::pair<std::string, std::string>> decisive{
      {"run.seed=7", "run.seed"},
      {"model.drafter.num_layers=2", "model.drafter.num_layers"},
      {"data.tokens_per_batch=2048", "data.tokens_per_batch"},
      {"data.buckets=[128]", "data.buckets"},
      {"train.grad_accum=2", "train.grad_accum"},
      {"train.anchors_per_sequence=8", "train.anchors_per_sequence"},
      {"train.loss_decay_gamma=4", "train.loss_decay_gamma"},
      {"train.lr=0.1", "train.lr"},
      {"train.warmup_ratio=0.2", "train.warmup_ratio"},
      {"train.schedule=linear", "train.schedule"},
      {"train.weight_decay=0.1", "train.weight_decay"},
      {"train.adam_beta2=0.999", "train.adam_beta2"},
      {"train.grad_clip=0.5", "train.grad_clip"},
      {"train.epochs=3", "train.epochs"}};
  for (const auto& [override_, key] : decisive) {
    CAPTURE(override_);
    CHECK(error_of([&] { nodes::run_training(small_run_config(dir, {override_}), resume); }).find(key + ":") !=
          std::string::npos);
  }
  // The batching policy is the pipeline's pad_bucket node: 52 vs 75 steps
  // per epoch from the same cursor would continue a different run.
  auto fixed = small_run_config(dir);
  for (auto& n : fixed.pipeline.nodes)
    if (n.name == "pad") n.type = "pad_bucket.fixed_batch";
  CHECK_THROWS_WITH(nodes::run_training(fixed, resume),
                    doctest::Contains("pipeline.nodes.pad (the batching policy): pad_bucket.token_budget -> "
                                      "pad_bucket.fixed_batch {batch_size: 8}"));
  // What only changes how the run is watched or how long it goes resumes.
  auto result = nodes::run_training(
      small_run_config(dir, {"run.max_steps=3", "checkpoint.every_steps=1", "metrics.console_every=1", "run.threads=1"}),
      resume);
  CHECK(result.completed_steps == 3);
}
