// `dflow cache-features CONFIG`: the target forward over the dataset once,
// writing each sample's features into the feature cache a features.cached
// node reads (data/feature_cache.hpp). It walks epoch 0's plan with the
// run's own batching, so every sample's features are computed in the shapes
// training computes them (with token-budget buckets a float32 cache equals
// the online features bit for bit). Resumable: a rerun skips the samples of
// published shards. Several ranks (torchrun, `dflow launch --run
// cache-features`) split the batches; each writes its own shards.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/data_error.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/features_cached.hpp"
#include "nodes/run_context.hpp"
#include "tools/cli.hpp"
#include "train/launch_env.hpp"

namespace dflow::cli {

namespace {

struct CacheOptions {
  std::string file, dir, dtype;
  int shard_mb = 0;
};

std::string duration_text(double seconds) {
  char text[32];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

int cache_features(const CacheOptions& cli, const Common& common) {
  auto config = config::load_config(cli.file, common.overrides);
  if (common.log_level.empty()) log::set_level(config.run.log_level);
  torch::set_num_threads(config.run.torch_threads);
  auto params = nodes::cached_features_node(config).value_or(nodes::CachedFeaturesParams{});
  if (!cli.dir.empty()) params.dir = cli.dir;
  if (!cli.dtype.empty()) params.dtype = cli.dtype;
  if (cli.shard_mb > 0) params.shard_mb = cli.shard_mb;
  if (params.dir.empty())
    throw ConfigError("cache-features: no cache directory: give --dir, or declare a features.cached node with "
                      "params.dir in " + cli.file);
  data::FeatureDtype dtype;
  try {
    dtype = data::parse_feature_dtype(params.dtype);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("cache-features: --dtype: ") + e.what());
  }

  nodes::RunOptions options;
  options.prepare_nodes = false;  // the features.cached node would refuse the cache this fills
  try {
    if (auto env = train::read_launch_env()) {
      options.rank = env->rank, options.world_size = env->world_size, options.local_rank = env->local_rank;
    }
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("launcher environment: ") + e.what());
  }
  nodes::RunContext run(config, options, nullptr);
  const int rank = options.rank, world = options.world_size;
  const std::string tag = world > 1 ? "rank " + std::to_string(rank) + ": " : "";

  data::create_or_check_manifest(params.dir, nodes::run_feature_manifest(run, dtype, "cache-features"));
  data::FeatureCacheReader cache(params.dir);
  nodes::check_cached_samples(run, cache);

  // This rank's batches of epoch 0 that hold a sample the cache lacks.
  const auto plan = run.plans().get(0);
  std::vector<const data::PlannedBatch*> todo;
  std::set<int64_t> missing;
  int64_t mine = 0;
  for (const auto& batch : plan->batches()) {
    if (batch.index_in_epoch % world != rank) continue;
    mine += batch.num_samples();
    const auto lacking = cache.missing(batch.sample_ids);
    if (lacking.empty()) continue;
    todo.push_back(&batch);
    missing.insert(lacking.begin(), lacking.end());
  }
  const std::vector<int64_t> missing_ids(missing.begin(), missing.end());
  const uint64_t projected = nodes::projected_feature_bytes(run, cache.manifest(), missing_ids);
  const uint64_t per_token = data::feature_row_bytes(dtype, cache.manifest().width());
  log::info("cache", log::str(tag, params.dir, ": ", mine - static_cast<int64_t>(missing.size()), " of this rank's ",
                              mine, " samples already cached; ", missing.size(), " to compute in ", todo.size(),
                              " batch(es): projected ", data::format_bytes(projected), " (",
                              data::to_string(dtype), ", ", per_token, " bytes a token)"));
  data::check_free_space(params.dir, projected, "the feature cache");

  const auto& target = *run.targets.front();
  const bool pin = target.device().is_cuda();
  data::FeatureCacheWriter writer(params.dir, "r" + std::to_string(rank), dtype, cache.manifest().width(),
                                  uint64_t(params.shard_mb) << 20);
  const auto started = std::chrono::steady_clock::now();
  auto last_report = started;
  int64_t tokens = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& batch = *todo[i];
    try {
      const auto padded = nodes::collate_padded(run, batch, {}, 0, pin);
      const auto features = nodes::target_features(run, target, padded);
      nodes::write_sample_features(writer, run, padded, features, dtype,
                                   [&](int64_t id) { return missing.count(id) > 0; });
    } catch (const std::exception& e) {
      throw data::DataError("cache-features: " + tag + "batch " + std::to_string(batch.index_in_epoch) + " of epoch 0 (" +
                            std::to_string(batch.num_samples()) + " samples, first " +
                            std::to_string(batch.sample_ids.front()) + "): " + e.what() + "\n  the " +
                            std::to_string(writer.shards_published()) +
                            " shard(s) published by this run are kept; run the same command again to continue");
    }
    tokens += batch.real_tokens;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - started).count();
    if (i + 1 == todo.size() || std::chrono::duration<double>(now - last_report).count() >= 5.0) {
      last_report = now;
      const double eta = elapsed / static_cast<double>(i + 1) * static_cast<double>(todo.size() - i - 1);
      log::info("cache", log::str(tag, i + 1, "/", todo.size(), " batches, ", static_cast<int64_t>(tokens / elapsed),
                                  " tokens/s, ", data::format_bytes(writer.bytes_written()), " written, ETA ",
                                  duration_text(eta)));
    }
  }
  writer.publish();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  cache.refresh();
  std::cout << "feature cache " << params.dir << ": " << tag << "wrote " << writer.samples_written() << " samples ("
            << tokens << " tokens, " << data::format_bytes(writer.bytes_written()) << ", " << per_token
            << " bytes a token, " << data::to_string(dtype) << ") in " << duration_text(elapsed) << "; it holds "
            << cache.num_samples() << " of the dataset's " << run.dataset.size() << " samples" << std::endl;
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
  add_common_options(*sub, common);
  sub->callback([&action, &common] { action = [&common] { return cache_features(options, common); }; });
}

}  // namespace dflow::cli
