// Data-layer benchmark (not a test): on one core, over synthetic long-tailed
// data (log-normal lengths, 32..3072 tokens),
//   - prepare (JSONL -> shards), open with full checksum verification, plan build;
//   - load + collate throughput into caller memory (what pad_bucket does);
//   - padding efficiency (real / padded tokens) of TokenBudget, FixedBatch and
//     Pack (several whole samples per row of max_length 3072), side by side.
// Usage: bench_data [num_samples=20000] [seed=1] [median_tokens=350]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/collate.hpp"
#include "data/dataset.hpp"
#include "data/batching_policy.hpp"
#include "data/plan.hpp"
#include "data/prepare.hpp"

namespace {

using namespace dflow::data;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const std::vector<int> kBuckets{128, 256, 512, 1024, 2048, 3072};
// Ratio 1.5 between buckets: less padding, more distinct shapes.
const std::vector<int> kFineBuckets{128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072};
constexpr int64_t kTokensPerBatch = 16384;

// Chat-like lengths: log-normal (sigma 1) around the median, clamped to 32..3072.
void write_synthetic_jsonl(const std::filesystem::path& path, int num_samples, uint64_t seed, double median_tokens) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> length_draw(std::log(median_tokens), 1.0);
  std::uniform_int_distribution<int> token(0, 151935);
  std::ofstream out(path);
  std::string line;
  for (int i = 0; i < num_samples; ++i) {
    const int length = std::clamp(static_cast<int>(length_draw(rng)), 32, 3072);
    const int prompt_tokens = length / 3;
    line = "{\"input_ids\": [";
    for (int t = 0; t < length; ++t) {
      if (t > 0) line += ',';
      line += std::to_string(token(rng));
    }
    line += "], \"loss_mask\": [";
    for (int t = 0; t < length; ++t) {
      if (t > 0) line += ',';
      line += t >= prompt_tokens ? '1' : '0';
    }
    line += "]}\n";
    out << line;
  }
}

void report_plan(const char* name, const EpochPlan& plan) {
  double mean = 0;
  for (const auto& batch : plan.batches()) mean += static_cast<double>(batch.padded_tokens);
  mean /= static_cast<double>(plan.num_batches());
  double variance = 0;
  for (const auto& batch : plan.batches()) variance += std::pow(static_cast<double>(batch.padded_tokens) - mean, 2);
  const double stddev = std::sqrt(variance / static_cast<double>(plan.num_batches()));
  std::printf("  %-22s padding efficiency %5.1f%%  batches %6lld  padded tokens/batch mean %7.0f sd %7.0f max %7lld\n",
              name, 100.0 * plan.padding_efficiency(), static_cast<long long>(plan.num_batches()), mean, stddev,
              static_cast<long long>(plan.max_padded_tokens()));
}

// How long the plan runs one bucket without a break, against the bucket's size
// (a bucket-sorted order would run all of them in one block).
void report_interleave(const EpochPlan& plan) {
  int64_t longest = 0;
  int64_t run = 0;
  int bucket = -1;
  for (const auto& batch : plan.batches()) {
    run = batch.bucket_index == bucket ? run + 1 : 1;
    if (run > longest) longest = run;
    bucket = batch.bucket_index;
  }
  const auto counts = plan.batches_per_bucket();
  std::printf("  longest same-bucket run in plan order: %lld batches (largest bucket has %lld)\n",
              static_cast<long long>(longest), static_cast<long long>(*std::max_element(counts.begin(), counts.end())));
}

void bench_collate(const Dataset& dataset, const EpochPlan& plan) {
  const auto cells = static_cast<size_t>(plan.max_padded_tokens());
  std::vector<int64_t> ids(cells), positions(cells);
  std::vector<uint8_t> mask(cells);
  std::vector<int32_t> lengths(cells), documents(cells);
  const bool packed = !plan.batches().empty() && plan.batches().front().packed();
  for (int pass = 0; pass < 3; ++pass) {  // pass 0 may still fault pages in
    const auto start = Clock::now();
    for (const auto& batch : plan.batches()) {
      collate_into(dataset, batch, ids.data(), mask.data(), lengths.data(), 0, packed ? positions.data() : nullptr,
                   packed ? documents.data() : nullptr);
    }
    const double elapsed_s = seconds_since(start);
    std::printf("  load+collate pass %d: %.3f s, %.1f M real tokens/s, %.1f M padded tokens/s, %.0f batches/s, "
                "%.2f GB/s written\n",
                pass, elapsed_s, static_cast<double>(plan.real_tokens()) / elapsed_s / 1e6,
                static_cast<double>(plan.padded_tokens()) / elapsed_s / 1e6,
                static_cast<double>(plan.num_batches()) / elapsed_s,
                static_cast<double>(plan.padded_tokens()) * 9.0 / elapsed_s / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int num_samples = argc > 1 ? std::stoi(argv[1]) : 20000;
  const uint64_t seed = argc > 2 ? std::stoull(argv[2]) : 1;
  const double median_tokens = argc > 3 ? std::stod(argv[3]) : 350.0;
  const auto work_dir = std::filesystem::temp_directory_path() / ("dflow-bench-data-" + std::to_string(::getpid()));
  std::filesystem::create_directories(work_dir);

  write_synthetic_jsonl(work_dir / "train.jsonl", num_samples, seed, median_tokens);
  auto start = Clock::now();
  PrepareOptions prepare_options{work_dir / "train.jsonl", work_dir / "shards", 3072, TooLongPolicy::Truncate,
                                 151936, 65536, false};
  const auto report = prepare_jsonl(prepare_options);
  const double prepare_s = seconds_since(start);
  std::printf("%s\n", report.summary().c_str());
  std::printf("  prepare: %.2f s, %.2f M tokens/s, %.1f MB/s of JSONL\n", prepare_s,
              static_cast<double>(report.tokens_written) / prepare_s / 1e6,
              static_cast<double>(std::filesystem::file_size(work_dir / "train.jsonl")) / prepare_s / 1e6);

  start = Clock::now();
  const auto dataset = Dataset::open({(work_dir / "shards").string()});
  const double open_s = seconds_since(start);
  const auto shard_bytes = static_cast<double>(dataset.num_tokens()) * 5.0;
  std::printf("  open with checksums: %.3f s (%.2f GB/s over %.0f MB of records)\n", open_s,
              shard_bytes / open_s / 1e9, shard_bytes / 1e6);

  PlanOptions options;
  options.seed = seed;
  options.buckets = kBuckets;
  options.tokens_per_batch = kTokensPerBatch;
  start = Clock::now();
  const auto budget_plan = build_epoch_plan(dataset, options);
  std::printf("  plan build: %.2f ms\n%s\n", seconds_since(start) * 1e3, budget_plan.summary().c_str());

  std::printf("\npadding efficiency, %lld samples, %lld real tokens, median length %.0f:\n",
              static_cast<long long>(dataset.size()), static_cast<long long>(dataset.num_tokens()), median_tokens);
  report_plan("token_budget 16384", budget_plan);
  options.buckets = kFineBuckets;
  report_plan("token_budget x1.5 bkts", build_epoch_plan(dataset, options));
  options.buckets = kBuckets;
  for (const int batch_size : {4, 8, 16, 32}) {
    options.batching = fixed_size_batching(batch_size);
    report_plan(("fixed_batch " + std::to_string(batch_size)).c_str(), build_epoch_plan(dataset, options));
  }

  options.max_length = 3072;
  std::vector<EpochPlan> pack_plans;
  for (const int window : {256, 1024, 4096}) {
    options.batching = packed_batching(window);
    start = Clock::now();
    pack_plans.push_back(build_epoch_plan(dataset, options));
    const double build_ms = seconds_since(start) * 1e3;
    report_plan(("pack 16384 window " + std::to_string(window)).c_str(), pack_plans.back());
    std::printf("  %-22s plan build %.1f ms\n", "", build_ms);
  }

  report_interleave(budget_plan);

  std::printf("\nload+collate on one core (token_budget plan):\n");
  bench_collate(dataset, budget_plan);
  std::printf("\nload+collate on one core (pack plan, window 4096, with positions and document ids):\n");
  bench_collate(dataset, pack_plans.back());
  std::filesystem::remove_all(work_dir);
  return 0;
}
