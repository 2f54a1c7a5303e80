// `loss: kl` from a cache as a user runs it: `dflow train` refuses a cache
// without the target's last hidden state (exit 2, naming the directory and
// what it lacks); `dflow cache-features --with-last-layer` stores it, and
// the kl run then trains from the cache without running the target.
#include <doctest/doctest.h>

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

// The small run, drafter trained with `drafter_params`, its target node reading `cache`.
fs::path write_config(const fs::path& dir, const std::string& name, const fs::path& cache,
                      const std::string& drafter_params) {
  auto config = testing::small_run_config(dir / name, {"run.threads=1", "run.torch_threads=1", "train.epochs=1",
                                                       "run.max_steps=2", "run.log_level=info"});
  for (auto& n : config.pipeline.nodes) {
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + cache.string() + ", shard_mb: 1}"));
    }
    if (n.name == "drafter") n.params.reset(YAML::Load(drafter_params));
  }
  const auto path = dir / (name + ".yaml");
  std::ofstream(path) << config::to_yaml(config);
  return path;
}

}  // namespace

TEST_CASE("Cli.KlSources.a_cache_for_kl_stores_the_last_layer_and_one_without_it_is_refused") {
  const auto dir = testing::fresh_dir("kl-cli"), ce_cache = dir / "ce-cache", kl_cache = dir / "kl-cache";
  const std::string bin = testing::dflow_binary();
  const auto ce = write_config(dir, "ce", ce_cache, "{}");
  auto o = testing::run_command(bin + " cache-features " + ce.string(), 180);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_FALSE(data::read_manifest(ce_cache).last_layer);

  const auto kl_on_ce = write_config(dir, "kl-on-ce", ce_cache, "{loss: kl}");
  o = testing::run_command(bin + " train " + kl_on_ce.string(), 180);
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("the feature cache " + ce_cache.string()) != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("the target's last hidden state, layer N-1") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("--with-last-layer") != std::string::npos, o.output);

  const auto kl = write_config(dir, "kl", kl_cache, "{loss: kl}");
  o = testing::run_command(bin + " cache-features " + ce.string() + " --dir " + kl_cache.string() + " --with-last-layer",
                           180);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto manifest = data::read_manifest(kl_cache);
  CHECK(manifest.last_layer);
  CHECK(manifest.version == 2);
  o = testing::run_command(bin + " train " + kl.string(), 180);
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(o.output.find("the target is not run") != std::string::npos);
}
