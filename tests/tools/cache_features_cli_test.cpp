// `dflow cache-features` as a user runs it: a full disk stops it with the
// published shards kept and a rerun completes the cache; two ranks under
// `dflow launch --run cache-features` each write their own shards and
// together fill it; training then reads it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "data/feature_cache.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

std::string dflow_bin() { return ::dflow::testing::dflow_binary(); }

// The small run with its target node reading `cache` (1 MiB shards).
fs::path write_cached_config(const fs::path& dir, const fs::path& cache) {
  auto config = testing::small_run_config(dir / "run", {"run.threads=1", "run.torch_threads=1", "train.epochs=1",
                                                        "run.max_steps=4", "run.log_level=info"});
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + cache.string() + ", shard_mb: 1}"));
    }
  const auto path = dir / "run.yaml";
  std::ofstream(path) << config::to_yaml(config);
  return path;
}

size_t count_files(const fs::path& dir, const std::string& prefix, const std::string& ext) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir / "shards"))
    if (e.path().filename().string().rfind(prefix, 0) == 0 && e.path().extension() == ext) ++n;
  return n;
}

}  // namespace

TEST_CASE("Cli.CacheFeatures.a_full_disk_stops_it_and_a_rerun_completes_the_cache") {
  const auto dir = testing::fresh_dir("cf-full"), cache = dir / "cache";
  const auto config = write_cached_config(dir, cache);
  // Half the cache first: rank 0 of 2 (as torchrun would start it) fills its share.
  auto o = testing::run_command("env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 " +
                                    dflow_bin() + " cache-features " + config.string() + " --dtype float32", 120);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto half = data::FeatureCacheReader(cache).num_samples();
  CHECK(half > 0);
  CHECK(half < 240);
  // Then the rest with a file-size limit of 3 MiB standing in for a full
  // disk: the write that crosses it fails (EFBIG) as ENOSPC would, in the
  // first 8 MiB shard.
  o = testing::run_command("bash -c 'trap \"\" XFSZ; ulimit -f 3072; exec " + dflow_bin() + " cache-features " +
                               config.string() + " --dtype float32 --shard-mb 8'",
                           120);
  CHECK(o.exit_code == 1);
  CHECK(o.output.find("cannot write") != std::string::npos);
  CHECK(o.output.find(".bin.tmp") != std::string::npos);  // names the file
  CHECK(o.output.find("run the same command again to continue") != std::string::npos);
  CHECK(data::FeatureCacheReader(cache).num_samples() == half);  // nothing partial is published, nothing lost
  // Training refuses the short cache, naming what it lacks.
  o = testing::run_command(dflow_bin() + " train " + config.string(), 120);
  CHECK(o.exit_code == 2);
  CHECK(o.output.find("lacks " + std::to_string(240 - half) + " of the dataset's 240 samples") != std::string::npos);
  // The rerun keeps what was published and writes the rest.
  o = testing::run_command(dflow_bin() + " cache-features " + config.string() + " --dtype float32", 120);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(o.output.find(std::to_string(half) + " of this rank's 240 samples already cached") != std::string::npos);
  CHECK(o.output.find("it holds 240 of the dataset's 240 samples") != std::string::npos);
  o = testing::run_command(dflow_bin() + " train " + config.string(), 120);
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(o.output.find("the target is not run") != std::string::npos);
}

TEST_CASE("Cli.CacheFeatures.two_ranks_each_write_their_shards_and_fill_it_together") {
  const auto dir = testing::fresh_dir("cf-ranks"), cache = dir / "cache";
  const auto config = write_cached_config(dir, cache);
  auto o = testing::run_command(dflow_bin() + " launch -n 2 --run cache-features " + config.string(), 180);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(count_files(cache, "r0-", ".idx") >= 1);
  CHECK(count_files(cache, "r1-", ".idx") >= 1);
  CHECK(data::FeatureCacheReader(cache).num_samples() == 240);
  o = testing::run_command(dflow_bin() + " train " + config.string(), 120);
  CHECK_MESSAGE(o.exit_code == 0, o.output);
}
