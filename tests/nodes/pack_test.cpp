// End-to-end with pad_bucket.pack: several samples per row through the whole
// graph, every sample once per epoch, less padding, exact resume.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::stopped_after;
using testing::step_records;
using testing::with_pad;

namespace {

struct EpochTotals {
  std::vector<int64_t> sample_ids;
  int64_t real_tokens = 0, padded_tokens = 0;
};

EpochTotals totals_of(const std::vector<nlohmann::json>& records) {
  EpochTotals t;
  for (const auto& r : records) {
    for (const auto& id : r["sample_ids"]) t.sample_ids.push_back(id.get<int64_t>());
    t.real_tokens += r["real_tokens"].get<int64_t>();
    t.padded_tokens += r["padded_tokens"].get<int64_t>();
  }
  std::sort(t.sample_ids.begin(), t.sample_ids.end());
  return t;
}

}  // namespace

TEST_CASE("Train.Pack.every_sample_once_per_epoch_with_less_padding") {
  auto packed_dir = fresh_dir("pack"), budget_dir = fresh_dir("pack-budget");
  // Rows of 512 tokens hold several of these ~100-token samples.
  auto packed_result = nodes::run_training(
      with_pad(small_run_config(packed_dir, {"train.epochs=1", "data.max_length=512", "data.buckets=[64, 128, 512]"}),
               "pad_bucket.pack"),
      {});
  nodes::run_training(small_run_config(budget_dir, {"train.epochs=1"}), {});
  const auto packed = step_records(packed_dir), budget = step_records(budget_dir);
  REQUIRE(!packed.empty());
  REQUIRE(packed.size() == static_cast<size_t>(packed_result.total_steps));
  const auto p = totals_of(packed), b = totals_of(budget);
  CHECK(p.sample_ids == b.sample_ids);  // one id per sample, each once
  CHECK(std::adjacent_find(p.sample_ids.begin(), p.sample_ids.end()) == p.sample_ids.end());
  CHECK(p.real_tokens == b.real_tokens);
  const double packed_efficiency = static_cast<double>(p.real_tokens) / static_cast<double>(p.padded_tokens);
  const double budget_efficiency = static_cast<double>(b.real_tokens) / static_cast<double>(b.padded_tokens);
  INFO("packed " << packed_efficiency << ", token_budget " << budget_efficiency);
  CHECK(packed_efficiency > budget_efficiency + 0.1);
  CHECK(packed_efficiency > 0.95);
  CHECK(packed.size() < budget.size());  // fewer, fuller batches
  for (const auto& r : packed) CHECK(std::isfinite(r["loss"].get<double>()));
  // Per-bucket statistics per sample, as with token_budget: each sample in
  // the bucket of its own length, adding up to the step's loss and tokens.
  std::set<std::string> buckets_seen;
  for (const auto& r : packed) {
    double loss_sum = 0, weight = 0;
    int64_t real_tokens = 0;
    for (const auto& [length, b] : r["buckets"].items()) {
      buckets_seen.insert(length);
      loss_sum += b["loss_sum"].get<double>();
      weight += b["loss_weight"].get<double>();
      real_tokens += b["real_tokens"].get<int64_t>();
    }
    REQUIRE(weight > 0);
    CHECK(loss_sum / weight == doctest::Approx(r["loss"].get<double>()));  // float32 step sum
    CHECK(real_tokens == r["real_tokens"].get<int64_t>());
  }
  CHECK(!buckets_seen.empty());
  CHECK(nodes::summarize(packed_result).find("batching pad_bucket.pack {pack_window: 4096}: padding efficiency") !=
        std::string::npos);
}

TEST_CASE("Train.Pack.resume_continues_exactly") {
  auto whole = fresh_dir("pack-whole"), split = fresh_dir("pack-split");
  auto config = [](const std::filesystem::path& dir, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"data.max_length=512", "data.buckets=[64, 128, 512]"});
    return with_pad(small_run_config(dir, std::move(extra)), "pad_bucket.pack");
  };
  auto result = nodes::run_training(config(whole, {"train.epochs=2"}), {});
  const int64_t stop = result.total_steps / 2 + 1;
  nodes::run_training(stopped_after(config(split, {"train.epochs=2"}), stop), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  // Another batching policy would continue a different run: refused.
  const std::vector<std::string> same_data{"train.epochs=2", "data.max_length=512", "data.buckets=[64, 128, 512]"};
  CHECK_THROWS_WITH(nodes::run_training(small_run_config(split, same_data), resume),
                    doctest::Contains("pad_bucket.pack {pack_window: 4096} -> pad_bucket.token_budget"));
  nodes::run_training(config(split, {"train.epochs=2"}), resume);
  auto a = step_records(whole), b = step_records(split);
  REQUIRE(a.size() == b.size());
  for (size_t i = static_cast<size_t>(stop); i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i] == b[i]);
  }
}
