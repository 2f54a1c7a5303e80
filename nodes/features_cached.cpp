// features.cached: the target's features read from a feature cache, in place
// of target_forward (nodes/features_cached.hpp). Before the graph exists the
// run checks the cache against itself: the manifest (target, tokenizer,
// layers), every cached sample's length (from the index), and, without
// fill, that every sample is there, naming what differs or what is missing.
// Each record's tokens hash is checked when it is read.
#include "nodes/features_cached.hpp"

#include <algorithm>
#include <set>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "nodes/replica_writers.hpp"
#include "train/feature_cache.hpp"

namespace dflow::nodes {

namespace {

const config::KeySet<CachedFeaturesParams>& cached_keys() {
  using config::OnResume;
  static const config::KeySet<CachedFeaturesParams> keys = [] {
    config::KeySet<CachedFeaturesParams> k;
    k.add("dir", [](CachedFeaturesParams& p) -> auto& { return p.dir; }, OnResume::may_change,
          "the feature cache directory (dflow cache-features, regenerate --features, or fill: true)",
          config::must<std::string>([](const std::string& v) { return !v.empty(); },
                                    "must name the cache directory"));
    k.add("fill", [](CachedFeaturesParams& p) -> auto& { return p.fill; }, OnResume::may_change,
          "run the target for samples the cache lacks and write them (epoch 0 fills, later epochs read)");
    k.add("dtype", [](CachedFeaturesParams& p) -> auto& { return p.dtype; }, OnResume::may_change,
          "storage dtype when this run creates the cache: float32 (exact), bfloat16, float8_e4m3",
          config::one_of({"float32", "bfloat16", "float8_e4m3"}));
    k.add("verify", [](CachedFeaturesParams& p) -> auto& { return p.verify; }, OnResume::may_change,
          "checksum every record as it is read");
    k.add("shard_mb", [](CachedFeaturesParams& p) -> auto& { return p.shard_mb; }, OnResume::may_change,
          "shard size in MiB when writing", config::must<int>([](int v) { return v >= 1; }, "must be >= 1"));
    return k;
  }();
  return keys;
}

// What the replicas share: the checked cache, mapped once, and their writers.
struct CacheSource {
  CachedFeaturesParams params;
  data::FeatureDtype dtype = data::FeatureDtype::bfloat16;
  std::shared_ptr<data::FeatureCacheReader> reader;
  std::unique_ptr<ReplicaWriters> writers;
};
using PreparedCache = std::shared_ptr<CacheSource>;

std::vector<int64_t> all_samples(const RunContext& run) {
  std::vector<int64_t> ids(static_cast<size_t>(run.dataset.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}

PreparedCache prepare_cache(const RunContext& run, const config::NodeDecl& node) {
  const std::string key = node_path(run.config.pipeline, node);
  auto section = node_params(run.config.pipeline, node);
  auto source = std::make_shared<CacheSource>();
  source->params = read_cached_features_params(section);
  source->writers = std::make_unique<ReplicaWriters>(node.replicas);
  const auto& p = source->params;
  auto refuse = [&](const std::string& message) {
    return ConfigError(node.mark, key, "node '" + node.name + "' (features.cached): " + message);
  };
  try {
    if (p.fill) {
      if (node.replicas != static_cast<int>(run.targets.size()))
        throw refuse("fill: true runs the target, one replica per target device: replicas is " +
                     std::to_string(node.replicas) + ", devices.target lists " + std::to_string(run.targets.size()));
      data::create_or_check_manifest(p.dir, run_feature_manifest(run, data::parse_feature_dtype(p.dtype),
                                                                 "train (fill: true)"));
    }
    source->reader = std::make_shared<data::FeatureCacheReader>(p.dir);
    const auto& cache = source->reader->manifest();
    source->dtype = cache.dtype;
    auto differences = data::manifest_differences(cache, run_feature_manifest(run, cache.dtype, ""));
    if (!differences.empty()) {
      std::string list;
      for (const auto& d : differences) list += "\n  " + d;
      const bool lacks_teacher = run.needs_teacher() && !cache.last_layer;
      throw refuse("the feature cache " + p.dir + " was made for another target or other layers:" + list +
                   (lacks_teacher ? "\n  " + run.teacher_because + ": rebuild the cache with the last layer into "
                                    "another directory (dflow cache-features CONFIG --dir NEW_DIR with this config "
                                    "stores it, as does --with-last-layer), or set fill: true on a new dir"
                                  : std::string("\n  fill another directory for this run (dflow cache-features)")));
    }
    check_cached_samples(run, *source->reader);
    const auto ids = all_samples(run);
    const auto missing = source->reader->missing(ids);
    const uint64_t per_token = data::feature_row_bytes(cache.dtype, cache.width());
    if (!missing.empty() && !p.fill) {
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 10; ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
      throw refuse("the feature cache " + p.dir + " lacks " + std::to_string(missing.size()) + " of the dataset's " +
                   std::to_string(ids.size()) + " samples: [" + list + (missing.size() > 10 ? ", ...]" : "]") +
                   "; fill them (dflow cache-features CONFIG continues where it stopped) or set fill: true");
    }
    if (!missing.empty()) {
      const uint64_t needed = projected_feature_bytes(run, cache, missing);
      log::info("data", log::str("feature cache ", p.dir, ": ", ids.size() - missing.size(), " of ", ids.size(),
                                 " samples cached; the target computes the other ", missing.size(), " and writes ",
                                 data::format_bytes(needed), " (", data::to_string(cache.dtype), ", ", per_token,
                                 " bytes a token)"));
      data::check_free_space(p.dir, needed, "filling the feature cache");
    } else {
      log::info("data", log::str("feature cache ", p.dir, ": all ", ids.size(), " samples (",
                                 data::format_bytes(source->reader->record_bytes()), ", ",
                                 data::to_string(cache.dtype), ", ", per_token, " bytes a token); the target is not run"));
    }
  } catch (const data::DataError& e) {
    throw refuse(e.what());
  } catch (const std::invalid_argument& e) {
    throw refuse(e.what());
  }
  return source;
}

class FeaturesCached final : public graph::FunctionBody {
 public:
  FeaturesCached(const RunContext& run, std::string name, int replica, PreparedCache source)
      : run_(run), name_(std::move(name)), replica_(replica), source_(std::move(source)) {
    if (source_->params.fill) {
      target_ = run.targets.at(static_cast<size_t>(replica)).get();
      const auto& manifest = source_->reader->manifest();
      writer_ = std::make_unique<data::FeatureCacheWriter>(
          source_->params.dir, "r" + std::to_string(run.options.rank) + "-w" + std::to_string(replica),
          manifest.dtype, manifest.width(), uint64_t(source_->params.shard_mb) << 20);
      source_->writers->attach(replica_, writer_.get());
    }
  }

  ~FeaturesCached() override {
    if (writer_) source_->writers->attach(replica_, nullptr);  // before the writer goes (it publishes then)
    if (writer_)
      log::info("data", log::str("feature cache ", source_->params.dir, ": node '", name_, "' replica ", replica_, " read ",
                                 read_batches_, " batch(es), ran the target on ", computed_batches_, " and wrote ",
                                 writer_->samples_written(), " sample(s), ", data::format_bytes(writer_->bytes_written())));
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, W] on the drafter's device: the cache's rows (the last layer too when it has it)
    with_batch_context(batch.plan, batch.position, [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      if (batch.plan.rows() == 0) return;  // a rank's empty share of a short step
      if (writer_ && fill_missing(batch, features)) return;
      features = cached_features(run_, *source_->reader, batch, source_->params.verify);
      ++read_batches_;
    });
    FeatureBatch result = drafter_batch(run_, std::move(batch), features, replica_);
    out.emit(graph::make_message(message.seq, message.cost, std::move(result)));
  }

 private:
  // A batch with samples the cache lacks runs the target, as target_forward
  // would, and writes those samples; false when every sample is cached. The
  // batch trains on what the cache stores (the records just encoded,
  // decoded again; the others read), never on the target's raw features: a
  // lossy storage dtype then gives the same values in every epoch, after a
  // resume, and on every replica.
  bool fill_missing(const PaddedBatch& batch, torch::Tensor& features) {
    auto& reader = *source_->reader;
    auto missing = reader.missing(batch.plan.sample_ids);
    if (missing.empty()) return false;
    // Written by a replica of this run but not yet published (that writer
    // publishes now), or published since by another rank: look again before
    // running the target.
    source_->writers->publish_holding(missing);
    if (reader.refresh() > 0) missing = reader.missing(batch.plan.sample_ids);
    if (missing.empty()) return false;
    // As the cache's records are: with the last layer when it stores it.
    const auto raw = target_features(run_, *target_, batch, reader.manifest().last_layer);
    const std::set<int64_t> wanted(missing.begin(), missing.end());
    EncodedRecords written;
    source_->writers->with(replica_, [&](data::FeatureCacheWriter& writer) {
      return write_sample_features(writer, run_, batch, raw, source_->dtype,
                                   [&](int64_t id) { return wanted.count(id) > 0; }, &written);
    });
    // The writer knows which samples its published shards hold (a shard
    // may fill in the middle of this batch): nothing is written twice.
    features = cached_features(run_, reader, batch, source_->params.verify, &written);
    ++computed_batches_;
    return true;
  }

  const RunContext& run_;
  std::string name_;
  int replica_;
  PreparedCache source_;
  const target::TargetModel* target_ = nullptr;
  std::unique_ptr<data::FeatureCacheWriter> writer_;
  int64_t read_batches_ = 0, computed_batches_ = 0;
};

}  // namespace

CachedFeaturesParams read_cached_features_params(config::YamlSection& params) {
  return read_params(cached_keys(), params);
}

std::optional<CachedFeaturesParams> cached_features_node(const config::Config& config,
                                                         const graph::NodeRegistry& kinds) {
  for (const auto& node : config.pipeline.nodes) {
    const RunHooks* hooks = run_hooks(kinds, node.type);
    if (!hooks || !hooks->feature_cache) continue;
    auto params = node_params(config.pipeline, node);
    return hooks->feature_cache(params);
  }
  return std::nullopt;
}

data::FeatureCacheManifest run_feature_manifest(const RunContext& run, data::FeatureDtype dtype, std::string source) {
  // From config.json and the files, never the loaded weights: a head-only run fingerprints as a whole one.
  auto m = train::feature_manifest_for(run.config.model.target.path, run.target_config, run.target_head->dtype(),
                                       run.feature_layer_ids);
  m.last_layer = run.needs_teacher();  // loss: kl reads the target's last hidden state from the cache
  m.dtype = dtype;
  char fingerprint[17];
  std::snprintf(fingerprint, sizeof fingerprint, "%016llx", static_cast<unsigned long long>(run.dataset.fingerprint()));
  m.dataset_fingerprint = fingerprint;
  m.dataset_samples = run.dataset.size();
  m.source = std::move(source);
  return m;
}

uint64_t projected_feature_bytes(const RunContext& run, const data::FeatureCacheManifest& manifest,
                                 std::span<const int64_t> ids) {
  uint64_t tokens = 0;
  for (int64_t id : ids) tokens += static_cast<uint64_t>(run.dataset.lengths()[static_cast<size_t>(id)]);
  return tokens * data::feature_row_bytes(manifest.dtype, manifest.width());
}

void check_cached_samples(const RunContext& run, const data::FeatureCacheReader& cache, bool tokens) {
  // From the index alone: each record's length against the dataset's
  // (both in memory). Neither the records nor the dataset's tokens are read:
  // start-up costs no I/O however large the cache; the tokens hash is
  // checked as each record is first read (cached_features).
  std::vector<std::string> wrong;
  int64_t wrong_count = 0;
  const auto lengths = run.dataset.lengths();
  for (int64_t id = 0; id < run.dataset.size(); ++id) {
    const auto entry = cache.entry(id);
    if (!entry) continue;
    const int64_t length = lengths[static_cast<size_t>(id)];
    std::string why;
    if (static_cast<int64_t>(entry->rows) != length)
      why = std::to_string(entry->rows) + " cached positions for " + std::to_string(length) + " tokens";
    else if (tokens && entry->tokens_hash != data::tokens_hash(run.dataset.sample(id).input_ids))
      why = "other tokens";
    if (why.empty()) continue;
    if (++wrong_count <= 5) wrong.push_back("sample " + std::to_string(id) + " (" + why + ")");
  }
  if (wrong_count == 0) return;
  std::string list;
  for (const auto& w : wrong) list += (list.empty() ? "" : ", ") + w;
  const auto& m = cache.manifest();
  throw data::DataError(std::to_string(wrong_count) + " cached sample(s) are not this dataset's: " + list +
                        (wrong_count > 5 ? ", ..." : "") + ". The cache was filled from " +
                        (m.dataset_fingerprint.empty() ? std::string("a regeneration's output")
                                                       : "dataset " + m.dataset_fingerprint + " (" +
                                                             std::to_string(m.dataset_samples) + " samples)") +
                        "; data.train here has " + std::to_string(run.dataset.size()) + " samples");
}

void register_features_cached(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "features.cached";
  spec.description = "the target's features read from a feature cache (params.dir) in place of target_forward; "
                     "fill: true runs the target for samples the cache lacks and writes them";
  spec.inputs = {{"in", "PaddedBatch"}};
  spec.outputs = {{"out", "FeatureBatch"}};
  spec.check_params = [](config::YamlSection& params) { read_cached_features_params(params); };
  spec.params = cached_keys().docs();
  spec.when_bound = "That is the feature cache's reader: reading and decoding cached features from disk bounds this "
                    "run, not compute. Give it more replicas, faster storage, or a smaller storage dtype (bfloat16, "
                    "float8_e4m3).";
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& run = environment(context).run;
    return std::make_unique<FeaturesCached>(run, context.name, context.replica,
                                            run.prepared_for<PreparedCache>(context.name));
  };
  RunHooks hooks;
  hooks.prepare = [](const RunContext& run, const config::NodeDecl& node) -> std::any { return prepare_cache(run, node); };
  hooks.needs_target = [](const config::Config& config, const config::NodeDecl& node) -> std::string {
    auto params = node_params(config.pipeline, node);
    return read_cached_features_params(params).fill ? "fills the samples the cache lacks with the target in-process (fill: true)"
                                                     : "";
  };
  hooks.gives_teacher = true;  // a cache that stores the last layer (prepare_cache refuses one without)
  hooks.capture = CaptureRole::target;  // the capture runs the target it reads the features of
  hooks.feature_cache = read_cached_features_params;
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
