#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "data/collate.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"
#include "data_fixtures.hpp"

namespace {
using namespace dflow::data;
using dflow::data::test::TempDir;
}  // namespace

TEST_CASE("Collate.RowsAreRightPaddedWithPadIdAndZeroMask") {
  TempDir dir;
  const auto samples = dflow::data::test::write_dataset(dir / "ds", {3, 8, 5}, 9);
  const auto dataset = Dataset::open({(dir / "ds").string()});
  PlannedBatch batch;
  batch.padded_length = 8;
  batch.sample_ids = {2, 0, 1};
  const int64_t pad_id = -7;
  const auto out = collate(dataset, batch, pad_id);
  CHECK(out.rows == 3);
  CHECK(out.padded_length == 8);
  CHECK(out.lengths == std::vector<int32_t>{5, 3, 8});
  for (int64_t row = 0; row < 3; ++row) {
    const auto& sample = samples[static_cast<size_t>(batch.sample_ids[static_cast<size_t>(row)])];
    for (int64_t t = 0; t < 8; ++t) {
      const auto cell = static_cast<size_t>(row * 8 + t);
      const bool real = t < static_cast<int64_t>(sample.input_ids.size());
      CHECK(out.input_ids[cell] == (real ? sample.input_ids[static_cast<size_t>(t)] : pad_id));
      CHECK(out.loss_mask[cell] == (real ? sample.loss_mask[static_cast<size_t>(t)] : 0));
    }
  }
}

TEST_CASE("Collate.IntoCallerMemoryMatchesTheOwningVersion") {
  TempDir dir;
  dflow::data::test::write_dataset(dir / "ds", dflow::data::test::lognormal_lengths(200, 5, 4, 256, 60.0), 10, 64);
  const auto dataset = Dataset::open({(dir / "ds").string()});
  PlanOptions options;
  options.buckets = {32, 64, 128, 256};
  options.tokens_per_batch = 1024;
  const auto plan = build_epoch_plan(dataset, options);
  for (const auto& batch : plan.batches()) {
    const auto owned = collate(dataset, batch, 0);
    // Caller memory starts dirty: every cell must be written.
    std::vector<int64_t> ids(static_cast<size_t>(batch.padded_tokens), 12345);
    std::vector<uint8_t> mask(static_cast<size_t>(batch.padded_tokens), 9);
    std::vector<int32_t> lengths(static_cast<size_t>(batch.rows()), -1);
    collate_into(dataset, batch, ids.data(), mask.data(), lengths.data(), 0);
    CHECK(ids == owned.input_ids);
    CHECK(mask == owned.loss_mask);
    CHECK(lengths == owned.lengths);
  }
}

TEST_CASE("Collate.RefusesASampleLongerThanThePaddedLength") {
  TempDir dir;
  dflow::data::test::write_dataset(dir / "ds", {3, 8}, 9);
  const auto dataset = Dataset::open({(dir / "ds").string()});
  PlannedBatch batch;
  batch.index_in_epoch = 4;
  batch.padded_length = 4;
  batch.sample_ids = {0, 1};
  CHECK_THROWS_WITH_AS(collate(dataset, batch, 0),
                       doctest::Contains("sample 1 has 8 tokens but batch 4 of epoch 0 pads to 4"), DataError);
}

TEST_CASE("Collate.ConcurrentReadersSeeTheSameBatches.2threads") {
  TempDir dir;
  dflow::data::test::write_dataset(dir / "ds", dflow::data::test::lognormal_lengths(300, 8, 4, 256, 60.0), 3, 50);
  const auto dataset = Dataset::open({(dir / "ds").string()});
  PlanOptions options;
  options.buckets = {64, 128, 256};
  options.tokens_per_batch = 512;
  const auto plan = build_epoch_plan(dataset, options);
  std::vector<CollatedBatch> expected;
  for (const auto& batch : plan.batches()) expected.push_back(collate(dataset, batch, 0));
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      for (int pass = 0; pass < 5; ++pass) {
        for (size_t i = 0; i < expected.size(); ++i) {
          const auto got = collate(dataset, plan.batches()[i], 0);
          mismatches[static_cast<size_t>(t)] += got.input_ids != expected[i].input_ids;
        }
      }
    });
  }
  for (auto& reader : readers) reader.join();
  CHECK(mismatches == std::vector<int>{0, 0});
}
