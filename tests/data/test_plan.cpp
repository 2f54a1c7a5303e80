#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "data/data_error.hpp"
#include "data/checksum.hpp"
#include "data/batching_policy.hpp"
#include "data/plan.hpp"
#include "data_fixtures.hpp"

namespace {

using namespace dflow::data;

const std::vector<int32_t>& long_tailed_lengths() {
  static const std::vector<int32_t> lengths = [] {
    const auto drawn = dflow::data::test::lognormal_lengths(3000, 42, 8, 1024, 200.0, 0.9);
    return std::vector<int32_t>(drawn.begin(), drawn.end());
  }();
  return lengths;
}

constexpr uint64_t kFingerprint = 0xfeedULL;

PlanOptions budget_options() {
  PlanOptions options;
  options.seed = 1234;
  options.epoch = 0;
  options.buckets = {64, 128, 256, 512, 1024};
  options.tokens_per_batch = 4096;
  options.grad_accum = 2;
  options.world_size = 1;
  return options;
}

EpochPlan plan_with(const PlanOptions& options, uint64_t fingerprint = kFingerprint) {
  return build_epoch_plan(long_tailed_lengths(), fingerprint, options);
}

std::vector<std::vector<int64_t>> sample_ids_in_order(const EpochPlan& plan) {
  std::vector<std::vector<int64_t>> ids;
  for (const auto& batch : plan.batches()) ids.push_back(batch.sample_ids);
  return ids;
}

void check_every_sample_once(const EpochPlan& plan) {
  std::vector<int> seen(long_tailed_lengths().size(), 0);
  for (const auto& batch : plan.batches()) {
    for (const int64_t id : batch.sample_ids) seen[static_cast<size_t>(id)] += 1;
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  CHECK(plan.num_samples() == static_cast<int64_t>(seen.size()));
}

size_t longest_same_bucket_run(const std::vector<int>& buckets) {
  size_t longest = 0;
  size_t run = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    run = (i > 0 && buckets[i] == buckets[i - 1]) ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  return longest;
}

}  // namespace

TEST_CASE("Plan.IsAPureFunctionOfSeedEpochDataAndOptions") {
  for (const auto& batching : {token_budget_batching(), fixed_size_batching(8)}) {
    auto options = budget_options();
    options.batching = batching;
    const auto reference = sample_ids_in_order(plan_with(options));
    CHECK(sample_ids_in_order(plan_with(options)) == reference);

    auto next_epoch = options;
    next_epoch.epoch = 1;
    CHECK(sample_ids_in_order(plan_with(next_epoch)) != reference);
    auto other_seed = options;
    other_seed.seed = 99;
    CHECK(sample_ids_in_order(plan_with(other_seed)) != reference);
    CHECK(sample_ids_in_order(plan_with(options, kFingerprint + 1)) != reference);
  }
}

TEST_CASE("Plan.EverySampleIsInExactlyOneBatchPerEpoch") {
  for (const auto& batching : {token_budget_batching(), fixed_size_batching(8)}) {
    auto options = budget_options();
    options.batching = batching;
    for (int epoch = 0; epoch < 3; ++epoch) {
      options.epoch = epoch;
      check_every_sample_once(plan_with(options));
    }
  }
}

TEST_CASE("Plan.TokenBudgetBatchesStayWithinBudgetAndTheirBucket") {
  const auto options = budget_options();
  const auto plan = plan_with(options);
  const auto& lengths = long_tailed_lengths();
  for (const auto& batch : plan.batches()) {
    CHECK(batch.padded_tokens <= options.tokens_per_batch);
    CHECK(batch.padded_tokens == batch.rows() * batch.padded_length);
    CHECK(batch.padded_length == options.buckets[static_cast<size_t>(batch.bucket_index)]);
    const auto bucket = static_cast<size_t>(batch.bucket_index);
    const int smaller_bucket = bucket > 0 ? options.buckets[bucket - 1] : 0;
    int64_t real_tokens = 0;
    for (const int64_t id : batch.sample_ids) {
      const int32_t length = lengths[static_cast<size_t>(id)];
      CHECK(length <= batch.padded_length);
      CHECK(length > smaller_bucket);  // the smallest bucket that fits
      real_tokens += length;
    }
    CHECK(batch.real_tokens == real_tokens);
  }
  CHECK(plan.max_padded_tokens() <= options.tokens_per_batch);
}

TEST_CASE("Plan.TokenBudgetPadsLessThanFixedBatchOnLongTailedLengths") {
  auto fixed = budget_options();
  fixed.batching = fixed_size_batching(16);
  const auto budget_plan = plan_with(budget_options());
  const auto fixed_plan = plan_with(fixed);
  INFO("token_budget " << budget_plan.padding_efficiency() << ", fixed_batch " << fixed_plan.padding_efficiency());
  // Power-of-two buckets waste about a quarter; padding to the longest of 16
  // random samples wastes about two thirds on this length distribution.
  CHECK(budget_plan.padding_efficiency() > 0.7);
  CHECK(budget_plan.padding_efficiency() > fixed_plan.padding_efficiency() + 0.2);
  for (const auto& batch : fixed_plan.batches()) {
    if (batch.index_in_epoch + 1 < fixed_plan.num_batches()) CHECK(batch.rows() == 16);
    int32_t longest = 0;
    for (const int64_t id : batch.sample_ids) {
      longest = std::max(longest, long_tailed_lengths()[static_cast<size_t>(id)]);
    }
    CHECK(batch.padded_length == longest);
  }
}

TEST_CASE("Plan.StepsPerEpochMatchesAWalkOverThePlan") {
  for (const int world_size : {1, 2, 3}) {
    for (const int grad_accum : {1, 2, 5}) {
      auto options = budget_options();
      options.world_size = world_size;
      options.grad_accum = grad_accum;
      const auto plan = plan_with(options);
      // Rank 0 ends every step (it gets the step's first batch), so counting its
      // step ends is counting optimizer steps.
      int64_t steps_walked = 0;
      for (const auto* batch : plan.batches_for_rank(0)) steps_walked += batch->is_last_micro_of_step() ? 1 : 0;
      CHECK(plan.steps_per_epoch() == steps_walked);
      CHECK(plan.steps_per_epoch() == plan.batches().back().step_in_epoch + 1);
      CHECK(plan.steps_per_epoch() ==
            (plan.num_batches() + world_size * grad_accum - 1) / (world_size * grad_accum));
    }
  }
}

TEST_CASE("Plan.RankSplitCoversThePlanOnceAndInStepOrder") {
  auto options = budget_options();
  options.world_size = 3;
  options.grad_accum = 2;
  const auto plan = plan_with(options);
  std::set<int64_t> covered;
  for (int rank = 0; rank < options.world_size; ++rank) {
    int64_t step = -1;
    int expected_micro = 0;
    for (const auto* batch : plan.batches_for_rank(rank)) {
      CHECK(covered.insert(batch->index_in_epoch).second);  // disjoint
      CHECK(batch->rank == rank);
      CHECK((batch->index_in_epoch % plan.batches_per_step()) % options.world_size == rank);
      if (batch->step_in_epoch != step) {
        step = batch->step_in_epoch;
        expected_micro = 0;
      }
      CHECK(batch->micro_in_step == expected_micro++);
      CHECK(batch->micros_in_step == plan.micros_in_step(step, rank));
    }
  }
  CHECK(covered.size() == static_cast<size_t>(plan.num_batches()));  // union is the whole plan
  CHECK_THROWS_AS(plan.batches_for_rank(3), DataError);
}

TEST_CASE("Plan.ARestoredCursorYieldsExactlyTheRemainingBatches") {
  auto options = budget_options();
  options.world_size = 2;
  const auto plan = plan_with(options);
  for (const int64_t stop_after : {int64_t{0}, int64_t{1}, int64_t{7}, plan.num_batches() - 1, plan.num_batches()}) {
    const PlanCursor saved{options.epoch, stop_after};
    // Resume rebuilds the plan from scratch, as a new process would.
    const auto resumed_plan = plan_with(options);
    const auto remaining = resumed_plan.remaining(saved);
    REQUIRE(static_cast<int64_t>(remaining.size()) == plan.num_batches() - stop_after);
    for (size_t i = 0; i < remaining.size(); ++i) {
      CHECK(remaining[i].index_in_epoch == stop_after + static_cast<int64_t>(i));
      CHECK(remaining[i].sample_ids == plan.batches()[static_cast<size_t>(stop_after) + i].sample_ids);
    }
    size_t per_rank = 0;
    for (int rank = 0; rank < 2; ++rank) per_rank += resumed_plan.batches_for_rank(rank, saved).size();
    CHECK(per_rank == remaining.size());
  }
  CHECK(plan.remaining(plan.cursor_at_step(plan.steps_per_epoch())).empty());
  CHECK(plan.remaining(plan.cursor_at_step(1)).front().step_in_epoch == 1);
  CHECK_THROWS_WITH_AS(plan.remaining(PlanCursor{1, 0}), doctest::Contains("cursor is for epoch 1"), DataError);
  CHECK_THROWS_WITH_AS(plan.remaining(PlanCursor{0, plan.num_batches() + 1}), doctest::Contains("another dataset"),
                       DataError);
}

TEST_CASE("Plan.BucketsAreInterleavedNotRunInBlocks") {
  const auto plan = plan_with(budget_options());
  std::vector<int> buckets;
  for (const auto& batch : plan.batches()) buckets.push_back(batch.bucket_index);
  const auto counts = plan.batches_per_bucket();
  const auto sorted_run = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  INFO("batches per bucket: " << plan.summary());
  CHECK(longest_same_bucket_run(buckets) * 4 <= sorted_run);
  // Every bucket with a few batches shows up in each quarter of the epoch.
  const size_t quarter = buckets.size() / 4;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] < 8) continue;
    for (size_t q = 0; q < 4; ++q) {
      const auto begin = buckets.begin() + static_cast<ptrdiff_t>(q * quarter);
      const auto end = begin + static_cast<ptrdiff_t>(quarter);
      CHECK(std::find(begin, end, static_cast<int>(b)) != end);
    }
  }
}

TEST_CASE("Plan.RefusesSamplesLongerThanTheLargestBucket") {
  const std::vector<int32_t> lengths{10, 20, 700, 30};
  auto options = budget_options();
  options.buckets = {64, 512};
  CHECK_THROWS_WITH_AS(build_epoch_plan(lengths, kFingerprint, options),
                       doctest::Contains("sample 2 has 700 tokens, more than the largest bucket (512)"), DataError);
}

TEST_CASE("Plan.RefusesOptionsThatCannotWork") {
  const std::vector<int32_t> lengths{10, 20};
  auto options = budget_options();
  options.tokens_per_batch = 512;
  CHECK_THROWS_WITH_AS(build_epoch_plan(lengths, kFingerprint, options),
                       doctest::Contains("data.tokens_per_batch (512) is smaller than the largest bucket (1024)"),
                       DataError);
  options = budget_options();
  options.buckets = {128, 64};
  CHECK_THROWS_WITH_AS(build_epoch_plan(lengths, kFingerprint, options), doctest::Contains("increasing"), DataError);
  CHECK_THROWS_WITH_AS(build_epoch_plan(std::vector<int32_t>{}, kFingerprint, budget_options()),
                       doctest::Contains("no samples"), DataError);
  options = budget_options();
  options.batching = fixed_size_batching(0);
  CHECK_THROWS_WITH_AS(build_epoch_plan(lengths, kFingerprint, options),
                       doctest::Contains("batch_size (pad_bucket.fixed_batch params) is 0"), DataError);
}

TEST_CASE("Plan.BatchMeasuresAreCarriedByEachBatch") {
  auto options = budget_options();
  options.epoch = 3;
  const auto plan = plan_with(options);
  int64_t real = 0;
  for (const auto& batch : plan.batches()) {
    CHECK(batch.epoch == 3);
    CHECK(batch.padding_efficiency() == doctest::Approx(double(batch.real_tokens) / double(batch.padded_tokens)));
    real += batch.real_tokens;
  }
  int64_t total_length = 0;
  for (const int32_t length : long_tailed_lengths()) total_length += length;
  CHECK(real == total_length);
  CHECK(plan.summary().find("[data] epoch 3 plan (token_budget): 3000 samples") != std::string::npos);
}

TEST_CASE("Plan.DoesNotChangeBetweenBuilds") {
  // A checkpoint resumes by cursor into a plan rebuilt by the new binary, so
  // the plan for given inputs must not change from one build (or standard
  // library) to the next. If the plan algorithm is changed on purpose, update
  // these digests and say in the release notes that resuming across the
  // change is not exact.
  std::vector<int32_t> lengths;
  for (int i = 0; i < 500; ++i) lengths.push_back(1 + (i * 7919) % 1024);
  auto digest = [&](std::shared_ptr<const BatchingPolicy> batching) {
    auto options = budget_options();
    options.batching = batching;
    const auto plan = build_epoch_plan(lengths, kFingerprint, options);
    uint64_t h = 0;
    for (const auto& batch : plan.batches()) {
      h = dflow::data::xxhash64(std::span<const int64_t>(batch.sample_ids), h);
    }
    return h;
  };
  CHECK(digest(token_budget_batching()) == 0x537c5cdf4aa5211ULL);
  CHECK(digest(fixed_size_batching(8)) == 0xf7675c935dac9a35ULL);
}
