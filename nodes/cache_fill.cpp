#include "nodes/cache_fill.hpp"

#include <torch/torch.h>

#include <chrono>
#include <fstream>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/data_error.hpp"
#include "graph/export.hpp"
#include "graph/pipeline.hpp"
#include "nodes/capture_nodes.hpp"
#include "nodes/capture_pipeline.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "report/analysis.hpp"
#include "report/live_server.hpp"
#include "report/pipeline_model.hpp"

namespace dflow::nodes {

namespace {

uint64_t file_system_free_bytes(const fs::path& dir) {
  fs::path probe = dir;
  while (!probe.empty() && !fs::exists(probe)) probe = probe.parent_path();
  return fs::space(probe.empty() ? fs::path(".") : probe).available;
}

// The capture's own run: its records beside the training run's, never in them.
config::Config capture_config(const config::Config& training) {
  config::Config config = training;
  config.run.out_dir = (fs::path(training.run.out_dir) / "cache-features").string();
  config.metrics.sinks = {"jsonl"};
  return config;
}

struct Work {
  int64_t rank_samples = 0;        // of this rank's batches, cached or not
  uint64_t this_rank_bytes = 0;    // what this rank will write
  uint64_t all_ranks_bytes = 0;    // what every rank has yet to write to the shared directory
};

// This rank's batches of epoch 0 that hold a sample the cache lacks, into
// `job`; and what all ranks lack, since every rank writes to one directory.
Work find_work(const RunContext& run, const data::FeatureCacheReader& cache, int rank, int world, CaptureJob& job) {
  job.plan = run.plans().get(0);
  std::vector<int64_t> missing_everywhere;
  Work work;
  for (const auto& batch : job.plan->batches()) {
    const auto lacking = cache.missing(batch.sample_ids);
    missing_everywhere.insert(missing_everywhere.end(), lacking.begin(), lacking.end());
    if (batch.index_in_epoch % world != rank) continue;
    work.rank_samples += batch.num_samples();
    if (lacking.empty()) continue;
    job.todo.push_back(&batch);
    job.missing.insert(lacking.begin(), lacking.end());
  }
  const std::vector<int64_t> missing_here(job.missing.begin(), job.missing.end());
  work.this_rank_bytes = projected_feature_bytes(run, cache.manifest(), missing_here);
  work.all_ranks_bytes = projected_feature_bytes(run, cache.manifest(), missing_everywhere);
  return work;
}

// Builds the capture graph and runs it over `job`; the telemetry and the
// report's findings go into `report`. Throws DataError naming the batch
// (through the failing node) and saying what is kept.
void run_capture_graph(const RunContext& run, const config::PipelineConfig& pipeline_config, CaptureJob& job,
                       report::LiveServer* live, FillReport& report) {
  graph::NodeRegistry registry = default_registry();
  register_capture_nodes(registry, job);
  fs::create_directories(run.out_dir);
  RunJournal journal(run);
  StateHome home(nullptr);                                      // nothing trains
  train::CheckpointWriter checkpoints(run.checkpoints_dir, 1);  // nothing is saved
  const RunEnvironment env{run, journal, home, checkpoints, nullptr};
  graph::BuildOptions build;
  build.threads = run.config.run.threads;
  build.user_context = &env;
  auto pipeline = graph::build_pipeline(pipeline_config, registry, build);
  const auto graph_json = graph::to_json(pipeline->description());
  if (run.options.rank == 0) std::ofstream(run.out_dir / "graph.json") << graph_json.dump(2) << "\n";
  if (live) live->set_graph(graph_json);
  report.run_dir = run.out_dir.string();

  job.started = std::chrono::steady_clock::now();
  if (job.todo.empty()) return;
  try {
    pipeline->run();
  } catch (const std::exception& e) {
    throw data::DataError("cache-features: " + job.tag + e.what() + "\n  the " +
                          std::to_string(job.writer->shards_published()) +
                          " shard(s) this run published are kept; run the same command again to continue");
  }
  report.telemetry = graph::to_json(pipeline->telemetry());
  const nlohmann::json last = {{"kind", "step"}, {"global_step", job.batches_written.load()},
                               {"total_steps", static_cast<int64_t>(job.todo.size())}, {"telemetry", report.telemetry}};
  report.findings = report::analyze(report::pipeline_model(graph_json, &report.telemetry), {last}).summary;
}

}  // namespace

void check_capture_space(const fs::path& dir, uint64_t all_ranks_bytes, uint64_t this_rank_bytes, int world_size,
                         uint64_t free_bytes) {
  if (free_bytes >= all_ranks_bytes) return;
  const std::string shares =
      world_size > 1 ? " for the " + std::to_string(world_size) + " ranks' shares (this rank's: " +
                           data::format_bytes(this_rank_bytes) + "; every rank writes to this directory)"
                     : "";
  throw data::DataError("cache-features: the feature cache needs " + data::format_bytes(all_ranks_bytes) +
                        " more in " + dir.string() + shares + ", the disk has " + data::format_bytes(free_bytes) +
                        " free; free space, choose another directory, or store fewer bytes per value (dtype: "
                        "bfloat16 or float8_e4m3)");
}

FillReport fill_feature_cache(const config::Config& training, const FillOptions& fill) {
  const auto& params = fill.params;
  if (params.dir.empty())
    throw ConfigError("cache-features: no cache directory: give --dir, or declare a features.cached node with params.dir");
  CaptureJob job;
  try {
    job.dtype = data::parse_feature_dtype(params.dtype);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("cache-features: dtype: ") + e.what());
  }
  const config::Config config = capture_config(training);
  const auto pipeline_config = capture_pipeline(config.pipeline, default_registry());  // refused before any model loads
  RunOptions options;
  options.prepare_nodes = false;  // the features.cached node would refuse the cache this fills
  options.whole_target_because = "cache-features runs the target in-process";
  options.rank = fill.rank, options.world_size = fill.world_size, options.local_rank = fill.local_rank;
  options.live = fill.live;
  RunContext run(config, options, nullptr);
  const int rank = fill.rank, world = fill.world_size;
  job.tag = world > 1 ? "rank " + std::to_string(rank) + ": " : "";
  job.progress_every_s = fill.progress_every_s;

  // The last layer (the teacher of loss: kl): when the config's drafter
  // trains with kl (run.needs_teacher() already), when asked, or when the
  // cache there stores it (its records must all be alike).
  if (!run.needs_teacher()) {
    if (fill.last_layer)
      run.teacher_because = "cache-features --with-last-layer stores the target's last hidden state";
    else if (fs::exists(fs::path(params.dir) / "manifest.json") && data::read_manifest(params.dir).last_layer)
      run.teacher_because = "the feature cache " + params.dir + " stores the target's last hidden state";
  }
  data::create_or_check_manifest(params.dir, run_feature_manifest(run, job.dtype, "cache-features"));
  data::FeatureCacheReader cache(params.dir);
  check_cached_samples(run, cache, /*tokens=*/true);  // the samples found cached are skipped, never read
  const Work work = find_work(run, cache, rank, world, job);
  FillReport report;
  report.bytes_per_token = data::feature_row_bytes(job.dtype, cache.manifest().width());
  log::info("cache", log::str(job.tag, params.dir, ": ", work.rank_samples - static_cast<int64_t>(job.missing.size()),
                              " of this rank's ", work.rank_samples, " samples already cached; ", job.missing.size(),
                              " to compute in ", job.todo.size(), " batch(es): projected ",
                              data::format_bytes(work.this_rank_bytes), " (", data::to_string(job.dtype), ", ",
                              report.bytes_per_token, " bytes a token)",
                              world > 1 ? log::str("; all ", world, " ranks: ", data::format_bytes(work.all_ranks_bytes))
                                        : std::string()));
  check_capture_space(params.dir, work.all_ranks_bytes, work.this_rank_bytes, world,
                      fill.free_bytes ? fill.free_bytes(params.dir) : file_system_free_bytes(params.dir));

  job.writer = std::make_unique<data::FeatureCacheWriter>(params.dir, "r" + std::to_string(rank), job.dtype,
                                                          cache.manifest().width(), uint64_t(params.shard_mb) << 20);
  run_capture_graph(run, pipeline_config, job, fill.live, report);
  try {
    job.writer->publish();
  } catch (const std::exception& e) {
    throw data::DataError("cache-features: " + job.tag + "publishing the last shard: " + e.what() +
                          "\n  run the same command again to continue");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - job.started).count();
  report.samples_written = job.writer->samples_written();
  report.bytes_written = job.writer->bytes_written();
  report.tokens_computed = job.tokens_computed;
  report.batches_computed = job.batches_written;
  cache.refresh();
  report.cached_samples = cache.num_samples();
  report.dataset_samples = run.dataset.size();
  return report;
}

}  // namespace dflow::nodes
