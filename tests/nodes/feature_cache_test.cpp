// The feature cache end to end: a features.cached node in the target's place
// trains as the online run does (bit for bit from a float32 cache filled in
// the run's own batch shapes), the hybrid fill writes epoch 0 and reads after,
// a resume is exact, and a cache that is incomplete, corrupt or made for
// something else is refused naming what is wrong.
#include <doctest/doctest.h>

#include <fstream>

#include "config/errors.hpp"
#include "data/dataset.hpp"
#include "data/feature_cache.hpp"
#include "data/prepare.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
namespace fs = std::filesystem;

namespace {

// The config with its target node reading `dir` (features.cached, `params`).
config::Config cached(config::Config config, const fs::path& dir, const std::string& params = "") {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params = YAML::Load("{dir: " + dir.string() + (params.empty() ? "" : ", " + params) + "}");
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
