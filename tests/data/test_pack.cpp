// Packing: several whole samples per row, planned in the epoch plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "data/collate.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/batching_policy.hpp"
#include "data/plan.hpp"
#include "data/quarantine.hpp"
#include "data_fixtures.hpp"

namespace {

using namespace dflow::data;

// The distribution: median 600, clamped 32..3072.
std::vector<int32_t> chat_lengths(size_t count, uint64_t seed) {
  const auto drawn = dflow::data::test::lognormal_lengths(count, seed, 32, 3072, 600.0, 1.0);
  return {drawn.begin(), drawn.end()};
}

PlanOptions pack_options() {
  PlanOptions options;
  options.seed = 7;
  options.buckets = {512, 1024, 2048, 3072};
  options.tokens_per_batch = 4 * 3072;
  options.max_length = 3072;
  options.batching = packed_batching(1024);
  return options;
}

int64_t row_tokens(const PlannedBatch& batch, int64_t row, const std::vector<int32_t>& lengths) {
  int64_t tokens = 0;
  for (auto i = batch.row_begin[static_cast<size_t>(row)]; i < batch.row_begin[static_cast<size_t>(row) + 1]; ++i)
    tokens += lengths[static_cast<size_t>(batch.sample_ids[static_cast<size_t>(i)])];
  return tokens;
}

}  // namespace

TEST_CASE("Pack.RowsHoldWholeSamplesWithinMaxLengthAndEverySampleOnce") {
  const auto lengths = chat_lengths(5000, 3);
  const auto plan = build_epoch_plan(lengths, 0xabc, pack_options());
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& batch : plan.batches()) {
    REQUIRE(batch.packed());
    CHECK(batch.rows() <= 4);  // tokens_per_batch / max_length
    CHECK(batch.row_begin.front() == 0);
    CHECK(batch.row_begin.back() == batch.num_samples());
    int64_t real = 0;
    for (int64_t row = 0; row < batch.rows(); ++row) {
      const int64_t tokens = row_tokens(batch, row, lengths);
      CHECK(tokens <= batch.padded_length);
      CHECK(batch.padded_length <= 3072);
      real += tokens;
    }
    CHECK(real == batch.real_tokens);
    CHECK(batch.padded_tokens == batch.rows() * batch.padded_length);
    for (const int64_t id : batch.sample_ids) seen[static_cast<size_t>(id)] += 1;
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  CHECK(plan.num_samples() == static_cast<int64_t>(lengths.size()));
}

TEST_CASE("Pack.WastesUnderThreePercentOnChatLengthsWhereBucketsWasteAQuarter") {
  const auto lengths = chat_lengths(20000, 11);
  const auto packed = build_epoch_plan(lengths, 0xabc, pack_options());
  auto budget = pack_options();
  budget.batching = token_budget_batching();
  budget.buckets = {128, 256, 512, 1024, 2048, 3072};
  const auto bucketed = build_epoch_plan(lengths, 0xabc, budget);
  CHECK(packed.padding_efficiency() >= 0.97);
  CHECK(packed.padding_efficiency() > bucketed.padding_efficiency() + 0.05);
}

TEST_CASE("Pack.IsAPureFunctionOfSeedEpochDataAndOptions") {
  const auto lengths = chat_lengths(3000, 5);
  auto ids_of = [&](const PlanOptions& options, uint64_t fingerprint) {
    std::vector<std::vector<int64_t>> ids;
    const auto plan = build_epoch_plan(lengths, fingerprint, options);
    for (const auto& batch : plan.batches()) {
      ids.push_back(batch.sample_ids);
      ids.push_back(batch.row_begin);
    }
    return ids;
  };
  const auto options = pack_options();
  CHECK(ids_of(options, 1) == ids_of(options, 1));
  CHECK(ids_of(options, 1) != ids_of(options, 2));
  auto next_epoch = options;
  next_epoch.epoch = 1;
  CHECK(ids_of(options, 1) != ids_of(next_epoch, 1));
  auto other_window = options;
  other_window.batching = packed_batching(64);
  CHECK(ids_of(options, 1) != ids_of(other_window, 1));
}

TEST_CASE("Pack.RefusesASampleLongerThanMaxLengthNamingIt") {
  std::vector<int32_t> lengths{100, 5000, 200};
  auto options = pack_options();
  try {
    build_epoch_plan(lengths, 1, options);
    FAIL("expected DataError");
  } catch (const DataError& error) {
    CHECK(std::string(error.what()).find("sample 1 has 5000 tokens") != std::string::npos);
    CHECK(std::string(error.what()).find("data.max_length") != std::string::npos);
  }
  options.tokens_per_batch = 1000;
  CHECK_THROWS_AS(build_epoch_plan(std::vector<int32_t>{10}, 1, options), DataError);
}

TEST_CASE("Pack.QuarantineKeepsTheRestOfARowAndDropsEmptyRows") {
  std::vector<int32_t> lengths{4, 5, 6, 7};
  PlannedBatch batch;
  batch.padded_length = 11;
  batch.sample_ids = {0, 3, 1, 2};
  batch.row_begin = {0, 2, 4};
  const auto kept = without_samples(batch, {3}, lengths);
  CHECK(kept.sample_ids == std::vector<int64_t>{0, 1, 2});
  CHECK(kept.row_begin == std::vector<int64_t>{0, 1, 3});
  CHECK(kept.real_tokens == 15);
  const auto fewer = without_samples(batch, {0, 3}, lengths);
  CHECK(fewer.rows() == 1);
  CHECK(fewer.padded_tokens == 11);
}

TEST_CASE("Pack.CollateLaysSamplesBackToBackWithPositionsAndDocumentIds") {
  dflow::data::test::TempDir dir;
  const auto samples = dflow::data::test::write_dataset(dir / "ds", {3, 4, 2}, 9);
  const auto dataset = Dataset::open({(dir / "ds").string()});
  PlannedBatch batch;
  batch.padded_length = 8;
  batch.sample_ids = {1, 0, 2};
  batch.row_begin = {0, 2, 3};
  const auto out = collate(dataset, batch, -1);
  CHECK(out.rows == 2);
  CHECK(out.lengths == std::vector<int32_t>{7, 2});
  CHECK(out.position_ids == std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 0, /*row 1*/ 0, 1, 0, 1, 2, 3, 4, 5});
  CHECK(out.document_ids == std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 2, /*row 1*/ 0, 0, 1, 1, 1, 1, 1, 1});
  for (size_t t = 0; t < 4; ++t) CHECK(out.input_ids[t] == samples[1].input_ids[t]);
  for (size_t t = 0; t < 3; ++t) CHECK(out.input_ids[4 + t] == samples[0].input_ids[t]);
  for (size_t t = 0; t < 3; ++t) CHECK(out.loss_mask[4 + t] == samples[0].loss_mask[t]);
  CHECK(out.input_ids[7] == -1);
  CHECK(out.loss_mask[7] == 0);
  for (size_t t = 0; t < 2; ++t) CHECK(out.input_ids[8 + t] == samples[2].input_ids[t]);
  batch.padded_length = 6;  // row 0 needs 7 tokens
  CHECK_THROWS_AS(collate(dataset, batch, -1), DataError);
}
