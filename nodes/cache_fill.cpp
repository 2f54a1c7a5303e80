#include "nodes/cache_fill.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <set>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/data_error.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/run_context.hpp"

namespace dflow::nodes {

namespace {

std::string duration_text(double seconds) {
  char text[32];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

}  // namespace

FillReport fill_feature_cache(const config::Config& config, const FillOptions& fill) {
  const auto& params = fill.params;
  if (params.dir.empty())
    throw ConfigError("cache-features: no cache directory: give --dir, or declare a features.cached node with params.dir");
  data::FeatureDtype dtype;
  try {
    dtype = data::parse_feature_dtype(params.dtype);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("cache-features: dtype: ") + e.what());
  }
  RunOptions options;
  options.prepare_nodes = false;  // the features.cached node would refuse the cache this fills
  options.whole_target_because = "cache-features runs the target in-process";
  options.rank = fill.rank, options.world_size = fill.world_size, options.local_rank = fill.local_rank;
  RunContext run(config, options, nullptr);
  const int rank = fill.rank, world = fill.world_size;
  const std::string tag = world > 1 ? "rank " + std::to_string(rank) + ": " : "";

  data::create_or_check_manifest(params.dir, run_feature_manifest(run, dtype, "cache-features"));
  data::FeatureCacheReader cache(params.dir);
  check_cached_samples(run, cache);

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
  FillReport report;
  report.bytes_per_token = data::feature_row_bytes(dtype, cache.manifest().width());
  const uint64_t projected = projected_feature_bytes(run, cache.manifest(), missing_ids);
  log::info("cache", log::str(tag, params.dir, ": ", mine - static_cast<int64_t>(missing.size()), " of this rank's ",
                              mine, " samples already cached; ", missing.size(), " to compute in ", todo.size(),
                              " batch(es): projected ", data::format_bytes(projected), " (", data::to_string(dtype),
                              ", ", report.bytes_per_token, " bytes a token)"));
  data::check_free_space(params.dir, projected, "the feature cache");

  const auto& target = *run.targets.front();
  const bool pin = target.device().is_cuda();
  data::FeatureCacheWriter writer(params.dir, "r" + std::to_string(rank), dtype, cache.manifest().width(),
                                  uint64_t(params.shard_mb) << 20);
  const auto started = std::chrono::steady_clock::now();
  auto last_report = started;
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& batch = *todo[i];
    try {
      const auto padded = collate_padded(run, batch, {}, 0, pin);
      const auto features = target_features(run, target, padded);
      write_sample_features(writer, run, padded, features, dtype, [&](int64_t id) { return missing.count(id) > 0; });
    } catch (const std::exception& e) {
      throw data::DataError("cache-features: " + tag + "batch " + std::to_string(batch.index_in_epoch) +
                            " of epoch 0 (" + std::to_string(batch.num_samples()) + " samples, first " +
                            std::to_string(batch.sample_ids.front()) + "): " + e.what() + "\n  the " +
                            std::to_string(writer.shards_published()) +
                            " shard(s) this run published are kept; run the same command again to continue");
    }
    report.tokens_computed += batch.real_tokens;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - started).count();
    if (i + 1 == todo.size() || std::chrono::duration<double>(now - last_report).count() >= fill.progress_every_s) {
      last_report = now;
      const double eta = elapsed / static_cast<double>(i + 1) * static_cast<double>(todo.size() - i - 1);
      log::info("cache", log::str(tag, i + 1, "/", todo.size(), " batches, ",
                                  static_cast<int64_t>(static_cast<double>(report.tokens_computed) / std::max(elapsed, 1e-9)),
                                  " tokens/s, ", data::format_bytes(writer.bytes_written()), " written, ETA ",
                                  duration_text(eta)));
    }
  }
  try {
    writer.publish();
  } catch (const std::exception& e) {
    throw data::DataError("cache-features: " + tag + "publishing the last shard: " + e.what() +
                          "\n  run the same command again to continue");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.samples_written = writer.samples_written();
  report.bytes_written = writer.bytes_written();
  cache.refresh();
  report.cached_samples = cache.num_samples();
  report.dataset_samples = run.dataset.size();
  return report;
}

}  // namespace dflow::nodes
