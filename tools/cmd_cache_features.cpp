// `dflow cache-features CONFIG`: the target forward over the dataset once,
// writing each sample's features into the feature cache a features.cached
// node reads (nodes/cache_fill.hpp). Resumable; several ranks (torchrun, or
// `dflow launch --run cache-features`) split the work, each writing its own
// shards. It runs as a graph (the run's loader, batching, routing and target
// nodes with a writer sink), whose records `dflow report` reads.
#include <torch/torch.h>

#include <filesystem>
#include <iostream>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/log.hpp"
#include "graph/description.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/registry.hpp"
#include "report/live_server.hpp"
#include "tools/cli.hpp"
#include "train/launch_env.hpp"

namespace dflow::cli {

namespace {

struct CacheOptions {
  std::string file, dir, dtype, serve;
  int shard_mb = 0;
  bool with_last_layer = false;
};

int cache_features(const CacheOptions& cli, const Common& common) {
  auto config = config::load_config(cli.file, common.overrides);
  (void)graph::describe(config.pipeline, nodes::default_registry());  // node params before any model loads
  if (common.log_level.empty()) log::set_level(config.run.log_level);
  torch::set_num_threads(config.run.torch_threads);
  nodes::FillOptions fill;
  fill.params = nodes::cached_features_node(config, nodes::default_registry()).value_or(nodes::CachedFeaturesParams{});
  if (!cli.dir.empty()) fill.params.dir = cli.dir;
  if (!cli.dtype.empty()) fill.params.dtype = cli.dtype;
  if (cli.shard_mb > 0) fill.params.shard_mb = cli.shard_mb;
  fill.last_layer = cli.with_last_layer;
  try {
    if (auto env = train::read_launch_env())
      fill.rank = env->rank, fill.world_size = env->world_size, fill.local_rank = env->local_rank;
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("launcher environment: ") + e.what());
  }
  std::unique_ptr<report::LiveServer> live;
  if (!cli.serve.empty()) {
    auto live_options = report::parse_serve_address(cli.serve);
    live_options.run_dir = (std::filesystem::path(config.run.out_dir) / "cache-features").string();
    live = std::make_unique<report::LiveServer>(live_options);
    live->start();
    log::info("report", "live view at " + live->url());
    fill.live = live.get();
  }
  const auto r = nodes::fill_feature_cache(config, fill);
  const std::string rank = fill.world_size > 1 ? "rank " + std::to_string(fill.rank) + " " : "";
  std::cout << "feature cache " << fill.params.dir << ": " << rank << "wrote " << r.samples_written << " samples ("
            << data::format_bytes(r.bytes_written) << ", " << r.bytes_per_token << " bytes a token) in "
            << r.seconds << " s; it holds " << r.cached_samples << " of the dataset's " << r.dataset_samples
            << " samples" << std::endl;
  if (!r.findings.empty()) {
    std::cout << "where the capture waited:";
    for (const auto& line : r.findings) std::cout << "\n  - " << line;
    std::cout << std::endl;
  }
  if (fill.rank == 0 && r.batches_computed > 0)
    std::cout << "  records: " << r.run_dir << "/metrics.jsonl (dflow report " << r.run_dir << ")" << std::endl;
  return 0;
}

}  // namespace

void add_cache_features_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand(
      "cache-features",
      "run the target over the dataset once and write its features to the feature cache a features.cached node "
      "reads (resumable; several ranks with torchrun or `dflow launch --run cache-features`)");
  static CacheOptions options;
  sub->add_option("CONFIG", options.file, "YAML config file (the training run's)")->required()->check(CLI::ExistingFile);
  sub->add_option("--dir", options.dir, "cache directory (default: the features.cached node's params.dir)");
  sub->add_option("--dtype", options.dtype,
                  "float32 (exact) | bfloat16 | float8_e4m3 (default: the node's params.dtype, else bfloat16)");
  sub->add_option("--shard-mb", options.shard_mb, "shard size in MiB (default: the node's params.shard_mb, 256)");
  sub->add_flag("--with-last-layer", options.with_last_layer,
               "also store the target's last hidden state after its final norm (what loss: kl reads; automatic when "
               "the config's drafter trains with loss: kl)");
  sub->add_option("--serve", options.serve,
                  "live view of the capture at HOST:PORT (loopback only): /, /metrics (Prometheus), /graph.json");
  add_common_options(*sub, common);
  sub->callback([&action, &common] { action = [&common] { return cache_features(options, common); }; });
}

}  // namespace dflow::cli
