// The feature cache end to end: a features.cached node in the target's place
// trains as the online run does (bit for bit from a float32 cache filled in
// the run's own batch shapes), the hybrid fill writes epoch 0 and reads after,
// a resume is exact, and a cache that is incomplete, corrupt or made for
// something else is refused naming what is wrong.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "error_of.hpp"
#include "config/errors.hpp"
#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/feature_cache.hpp"
#include "data/prepare.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/features_cached.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
namespace fs = std::filesystem;

using dflow::testing::error_of;

namespace {

// The config with its target node reading `dir` (features.cached, `params`).
config::Config cached(config::Config config, const fs::path& dir, const std::string& params = "") {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + dir.string() + (params.empty() ? "" : ", " + params) + "}"));
    }
  return config;
}

nodes::FillReport fill(const config::Config& config, const fs::path& dir, const std::string& dtype) {
  nodes::FillOptions options;
  options.params.dir = dir.string();
  options.params.dtype = dtype;
  options.params.shard_mb = 1;  // several shards even for the small dataset
  return nodes::fill_feature_cache(config, options);
}

std::string error_of(const config::Config& config) {
  try {
    nodes::run_training(config, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<fs::path> shard_files(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir / "shards"))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Rewrites entry `i` of the index `idx` with `edit` and a valid checksum (a
// record as another filler might publish it).
void edit_index_entry(const fs::path& idx, size_t i, const std::function<void(data::FeatureIndexEntry&)>& edit) {
  std::ifstream in(idx, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  constexpr size_t kHeader = 40;
  REQUIRE(bytes.size() >= kHeader + (i + 1) * sizeof(data::FeatureIndexEntry) + 8);
  data::FeatureIndexEntry entry;
  std::memcpy(&entry, bytes.data() + kHeader + i * sizeof entry, sizeof entry);
  edit(entry);
  std::memcpy(bytes.data() + kHeader + i * sizeof entry, &entry, sizeof entry);
  const uint64_t sum = data::xxhash64(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  std::ofstream(idx, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

data::FeatureIndexEntry first_entry(const fs::path& idx) {
  data::FeatureIndexEntry entry{};
  edit_index_entry(idx, 0, [&](data::FeatureIndexEntry& e) { entry = e; });
  return entry;
}

}  // namespace

TEST_CASE("FeatureCache.a_float32_cache_trains_bit_for_bit_as_the_online_run") {
  const auto online_dir = fresh_dir("fc-online"), cached_dir = fresh_dir("fc-cached"), cache = fresh_dir("fc-cache32");
  const auto config = small_run_config(online_dir, {"train.epochs=2"});
  const auto report = fill(config, cache, "float32");
  CHECK(report.samples_written == report.dataset_samples);
  CHECK(report.cached_samples == report.dataset_samples);
  CHECK(shard_files(cache, ".idx").size() > 1);
  nodes::run_training(config, {});
  nodes::run_training(cached(small_run_config(cached_dir, {"train.epochs=2"}), cache), {});
  const auto online = step_records(online_dir), from_cache = step_records(cached_dir);
  REQUIRE(!online.empty());
  CHECK(online == from_cache);  // loss, grad norm, accuracy: every field of every step
  // A second fill finds nothing to do.
  CHECK(fill(config, cache, "float32").samples_written == 0);
}

TEST_CASE("FeatureCache.hybrid_fill_writes_epoch_0_reads_after_and_resumes_exactly") {
  const auto online_dir = fresh_dir("fc-h-online"), hybrid_dir = fresh_dir("fc-h-run"), cache = fresh_dir("fc-h-cache");
  const auto resumed_dir = fresh_dir("fc-h-resumed"), resumed_cache = fresh_dir("fc-h-resumed-cache");
  nodes::run_training(small_run_config(online_dir, {"train.epochs=2"}), {});
  const auto hybrid = cached(small_run_config(hybrid_dir, {"train.epochs=2"}), cache, "fill: true, dtype: float32");
  nodes::run_training(hybrid, {});
  const auto online = step_records(online_dir);
  CHECK(step_records(hybrid_dir) == online);
  // Every sample is in the cache now: a run without fill reads it all.
  CHECK(data::FeatureCacheReader(cache).num_samples() ==
        data::Dataset::open({(testing::assets_dir() / "data").string()}).size());
  const auto again_dir = fresh_dir("fc-h-again");
  nodes::run_training(cached(small_run_config(again_dir, {"train.epochs=2"}), cache), {});
  CHECK(step_records(again_dir) == online);

  // Stopped in epoch 0 (part of the cache written) and resumed: the records
  // are the uninterrupted run's.
  const int64_t stop = static_cast<int64_t>(online.size()) / 4;
  auto partial = cached(small_run_config(resumed_dir, {"train.epochs=2", "checkpoint.every_steps=5"}), resumed_cache,
                        "fill: true, dtype: float32");
  nodes::run_training(stopped_after(partial, stop), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(partial, resume);
  CHECK(step_records(resumed_dir) == online);
}

TEST_CASE("FeatureCache.bfloat16_and_fp8_caches_train_close_to_the_online_run") {
  const auto online_dir = fresh_dir("fc-q-online");
  const auto config = small_run_config(online_dir, {"train.epochs=1"});
  nodes::run_training(config, {});
  const auto online = step_records(online_dir);
  for (const std::string dtype : {"bfloat16", "float8_e4m3"}) {
    CAPTURE(dtype);
    const auto run_dir = fresh_dir("fc-q-" + dtype), cache = fresh_dir("fc-q-cache-" + dtype);
    fill(config, cache, dtype);
    nodes::run_training(cached(small_run_config(run_dir, {"train.epochs=1"}), cache), {});
    const auto records = step_records(run_dir);
    REQUIRE(records.size() == online.size());
    // Rounded features: the first step's loss moves a little, never much.
    const double a = online.front()["loss"].get<double>(), b = records.front()["loss"].get<double>();
    CHECK(a != b);
    CHECK(std::abs(a - b) / a < (dtype == "bfloat16" ? 1e-2 : 5e-2));
  }
}

TEST_CASE("FeatureCache.an_incomplete_corrupt_or_foreign_cache_is_refused_naming_what") {
  const auto cache = fresh_dir("fc-bad-cache");
  const auto config = small_run_config(fresh_dir("fc-bad-fill"), {"train.epochs=1"});
  fill(config, cache, "bfloat16");
  const auto idx = shard_files(cache, ".idx"), bins = shard_files(cache, ".bin");
  REQUIRE(idx.size() > 1);

  SUBCASE("another target layer is another cache") {
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-bad-layers"), {"model.drafter.target_layer_ids=[1, 2, 3]"}), cache));
    CHECK(e.find("layer ids: cache [1, 1, 1], this run [1, 2, 3]") != std::string::npos);
    CHECK(e.find("features.cached") != std::string::npos);
  }
  SUBCASE("a shard removed: the missing samples are named") {
    fs::remove(idx.back());
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-bad-missing")), cache));
    CHECK(e.find("lacks") != std::string::npos);
    CHECK(e.find("dflow cache-features") != std::string::npos);
  }
  SUBCASE("a truncated shard names the shard and its samples") {
    fs::resize_file(bins.front(), fs::file_size(bins.front()) / 2);
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-bad-trunc")), cache));
    CHECK(e.find(bins.front().filename().string()) != std::string::npos);
    CHECK(e.find("truncated") != std::string::npos);
    CHECK(e.find("samples [") != std::string::npos);
  }
  SUBCASE("a flipped byte fails the record's checksum, naming shard and sample") {
    {
      std::fstream f(bins.front(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      char c = 0;
      f.read(&c, 1);
      f.seekp(100);
      c = static_cast<char>(c ^ 0x5a);
      f.write(&c, 1);
    }
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-bad-flip")), cache));
    CHECK(e.find(bins.front().filename().string()) != std::string::npos);
    CHECK(e.find("fails its checksum") != std::string::npos);
    CHECK(e.find("sample ") != std::string::npos);
    CHECK(e.find("batch ") != std::string::npos);  // the node names the batch too
  }
  SUBCASE("a cache of another dataset: samples with other tokens are named") {
    // The same samples in another order: ids now name other tokens.
    const auto dir = fresh_dir("fc-bad-data");
    std::vector<std::string> lines;
    std::ifstream in(testing::assets_dir() / "data.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::ofstream(dir / "reversed.jsonl") << [&] {
      std::string text;
      for (auto it = lines.rbegin(); it != lines.rend(); ++it) text += *it + "\n";
      return text;
    }();
    data::PrepareOptions prepare;
    prepare.input_path = dir / "reversed.jsonl";
    prepare.out_dir = dir / "data";
    prepare.max_length = 128;
    data::prepare_jsonl(prepare);
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-bad-data-run"), {"data.train=[" + (dir / "data").string() + "]"}), cache));
    CHECK(e.find("are not this dataset's: sample 0 (") != std::string::npos);
  }
}

TEST_CASE("FeatureCache.a_bfloat16_hybrid_run_trains_on_what_it_stores_and_resumes_exactly") {
  // bfloat16 storage behind a float32 target (the defaults): the raw
  // features and the stored ones differ, so every epoch must train on the
  // stored ones for a resume to be exact.
  const auto run_dir = fresh_dir("fc-bf-run"), cache = fresh_dir("fc-bf-cache");
  nodes::run_training(cached(small_run_config(run_dir, {"train.epochs=2"}), cache, "fill: true"), {});
  const auto uninterrupted = step_records(run_dir);
  REQUIRE(uninterrupted.size() > 12);
  // Epoch 0 trained on what the cache holds: a run reading the whole cache
  // trains the same, bit for bit.
  const auto reread_dir = fresh_dir("fc-bf-reread");
  nodes::run_training(cached(small_run_config(reread_dir, {"train.epochs=2"}), cache), {});
  CHECK(step_records(reread_dir) == uninterrupted);

  // Killed in step 8 (the drafter fails) with the last checkpoint at step 4:
  // steps 5..7 are trained again after the resume, now from the records the
  // killed run published (a stop would checkpoint where it stops instead).
  const auto resumed_dir = fresh_dir("fc-bf-resumed"), resumed_cache = fresh_dir("fc-bf-resumed-cache");
  auto partial = cached(small_run_config(resumed_dir, {"train.epochs=2", "checkpoint.every_steps=4"}), resumed_cache,
                        "fill: true");
  auto killed = partial;
  config::FaultDecl crash;
  crash.kind = "exception";
  crash.step = 7;  // the 8th step's index
  crash.node = "drafter";
  killed.faults.push_back(crash);
  CHECK(error_of(killed).find("injected fault") != std::string::npos);
  REQUIRE(data::FeatureCacheReader(resumed_cache).num_samples() >= 7 * 8);  // steps 1..7's samples at least
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(partial, resume);
  CHECK(step_records(resumed_dir) == uninterrupted);
}

TEST_CASE("FeatureCache.a_hybrid_fill_computes_and_writes_each_sample_once") {
  // Batches of ~2.5 MB of float32 features and 1 MiB shards: a shard is
  // published in the middle of every batch, and the samples after it must
  // still count as written (and be published before anyone looks for them).
  const auto run_dir = fresh_dir("fc-once-run"), cache = fresh_dir("fc-once-cache");
  nodes::run_training(cached(small_run_config(run_dir, {"train.epochs=3", "data.tokens_per_batch=4096"}), cache,
                             "fill: true, dtype: float32, shard_mb: 1"),
                      {});
  REQUIRE(shard_files(cache, ".idx").size() > 3);
  data::FeatureCacheReader reader(cache);
  CHECK(reader.num_samples() == data::Dataset::open({(testing::assets_dir() / "data").string()}).size());
  CHECK(reader.duplicate_records() == 0);  // every sample's record once, in all the shards
}

TEST_CASE("FeatureCache.start_up_checks_the_index_alone_and_each_record_is_checked_when_read") {
  const auto cache = fresh_dir("fc-lazy-cache");
  const auto config = small_run_config(fresh_dir("fc-lazy-fill"), {"train.epochs=1"});
  fill(config, cache, "bfloat16");
  const auto idx = shard_files(cache, ".idx");
  REQUIRE(idx.size() > 1);

  SUBCASE("a record of other tokens (its length right) passes start-up and is refused at its first read") {
    const auto tampered = first_entry(idx.front());
    edit_index_entry(idx.front(), 0, [](data::FeatureIndexEntry& e) { e.tokens_hash ^= 1; });
    const auto e = error_of(cached(small_run_config(fresh_dir("fc-lazy-tokens"), {"train.epochs=1"}), cache));
    auto bin = idx.front();
    bin.replace_extension(".bin");
    CHECK_MESSAGE(e.find(bin.filename().string() + ": sample " + std::to_string(tampered.sample_id) + " holds the features of other tokens") !=
                      std::string::npos, e);
    CHECK_MESSAGE(e.find("batch ") != std::string::npos, e);  // found by the node, reading a batch, not at start-up
    // cache-features skips the samples it finds cached and never reads them:
    // it checks their tokens in the index before it starts.
    try {
      fill(config, cache, "bfloat16");
      FAIL("cache-features took a record of other tokens for its sample's");
    } catch (const data::DataError& error) {
      const std::string message = error.what();
      CHECK_MESSAGE(message.find("sample " + std::to_string(tampered.sample_id) + " (other tokens)") != std::string::npos,
                    message);
    }
  }
  SUBCASE("a record published after start-up is checked when it is read") {
    // The samples of the last shard are missing at start-up; then another
    // filler publishes them, one of them with other tokens.
    const auto last = idx.back();
    std::vector<int64_t> ids;
    {
      data::FeatureCacheReader before(cache);
      for (int64_t id = 0; id < 10000; ++id)
        if (before.contains(id) && before.shard_of(id).stem() == last.stem()) ids.push_back(id);
    }
    REQUIRE(!ids.empty());
    auto bin = last;
    bin.replace_extension(".bin");
    fs::remove(last);
    fs::remove(bin);
    nodes::RunOptions options;
    options.prepare_nodes = false;
    nodes::RunContext run(config, options, nullptr);
    data::FeatureCacheReader reader(cache);
    CHECK_NOTHROW(nodes::check_cached_samples(run, reader));
    REQUIRE(reader.missing(ids) == ids);
    const auto& m = reader.manifest();
    {
      data::FeatureCacheWriter other(cache, "other", m.dtype, m.width());
      for (int64_t id : ids) {
        const auto sample = run.dataset.sample(id);
        const int64_t rows = static_cast<int64_t>(sample.input_ids.size());
        std::vector<unsigned char> zeros(static_cast<size_t>(rows) * data::feature_row_bytes(m.dtype, m.width()));
        const uint64_t hash = data::tokens_hash(sample.input_ids) ^ (id == ids.front() ? 1 : 0);
        other.append(id, hash, rows, zeros);
      }
    }
    REQUIRE(reader.refresh() == 1);
    const data::PlannedBatch* with_tampered = nullptr;
    const data::PlannedBatch* with_good = nullptr;
    const auto plan = run.plans().get(0);
    for (const auto& b : plan->batches()) {
      const bool has_tampered = std::count(b.sample_ids.begin(), b.sample_ids.end(), ids.front()) > 0;
      const bool has_other = std::any_of(b.sample_ids.begin(), b.sample_ids.end(), [&](int64_t id) {
        return std::count(ids.begin() + 1, ids.end(), id) > 0;
      });
      if (has_tampered) with_tampered = &b;
      else if (has_other && !with_good) with_good = &b;
    }
    REQUIRE(with_tampered);
    const auto bad = nodes::collate_padded(run, *with_tampered, {}, 0, false);
    const auto e = error_of([&] { nodes::cached_features(run, reader, bad, true); });
    CHECK_MESSAGE(e.find("other-000000.bin: sample " + std::to_string(ids.front()) + " holds the features of other tokens") !=
                      std::string::npos, e);
    if (with_good) {
      const auto good = nodes::collate_padded(run, *with_good, {}, 0, false);
      CHECK_NOTHROW(nodes::cached_features(run, reader, good, true));
    }
  }
}

TEST_CASE("FeatureCache.two_target_replicas_fill_each_sample_once_and_train_on_what_they_store") {
  // Two replicas, each with its writer and an open shard until the end: in
  // epoch 1 each meets samples the other wrote but has not published.
  const auto run_dir = fresh_dir("fc-two-run"), cache = fresh_dir("fc-two-cache");
  auto two = cached(small_run_config(run_dir, {"train.epochs=2", "devices.target=[cpu, cpu]"}), cache, "fill: true");
  for (auto& n : two.pipeline.nodes)
    if (n.name == "target") n.replicas = 2;
  nodes::run_training(two, {});
  REQUIRE(shard_files(cache, ".idx").size() >= 2);  // both replicas wrote
  data::FeatureCacheReader reader(cache);
  CHECK(reader.num_samples() == data::Dataset::open({(testing::assets_dir() / "data").string()}).size());
  CHECK(reader.duplicate_records() == 0);
  // bfloat16 storage: the two replicas trained on the stored values, as a
  // one-replica run reading the finished cache does.
  const auto reread_dir = fresh_dir("fc-two-reread");
  nodes::run_training(cached(small_run_config(reread_dir, {"train.epochs=2"}), cache), {});
  CHECK(step_records(reread_dir) == step_records(run_dir));
}
