// `dflow cache-features` as a graph (nodes/cache_fill.hpp): it writes the
// records the serial loop wrote, continues after a failure without computing
// a published sample again, splits the work between ranks, refuses a disk
// that holds less than what every rank has yet to write, and leaves records
// the report reads, with every stage's waits.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include <yaml-cpp/yaml.h>

#include "config/errors.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/feature_cache.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/capture_pipeline.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "report/run_data.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
namespace fs = std::filesystem;

namespace {

// Registers the kind `type` of `kinds` again as `as`, with its hooks: a kind
// the code has never heard of by name.
void register_renamed(graph::NodeRegistry& kinds, const std::string& type, const std::string& as) {
  graph::NodeSpec spec = *kinds.find(type);
  nodes::RunHooks hooks = *nodes::run_hooks(kinds, type);
  spec.type = as;
  nodes::add_node_kind(kinds, std::move(spec), std::move(hooks));
}

nodes::FillOptions fill_options(const fs::path& dir, int rank = 0, int world = 1) {
  nodes::FillOptions options;
  options.params.dir = dir.string();
  options.params.dtype = "float32";
  options.params.shard_mb = 1;  // several shards even for the small dataset
  options.rank = rank, options.world_size = world;
  return options;
}

// The serial loop `dflow cache-features` ran before the graph: collate,
// forward, copy, encode and write, batch after batch.
void serial_fill(const config::Config& config, const fs::path& dir) {
  nodes::RunOptions options;
  options.prepare_nodes = false;
  nodes::RunContext run(config, options, nullptr);
  data::create_or_check_manifest(dir, nodes::run_feature_manifest(run, data::FeatureDtype::float32, "cache-features"));
  data::FeatureCacheWriter writer(dir, "r0", data::FeatureDtype::float32,
                                  data::FeatureCacheReader(dir).manifest().width(), uint64_t{1} << 20);
  for (const auto& batch : run.plans().get(0)->batches()) {
    const auto padded = nodes::collate_padded(run, batch, {}, 0, false);
    nodes::write_sample_features(writer, run, padded, nodes::target_features(run, *run.targets.front(), padded),
                                 data::FeatureDtype::float32, [](int64_t) { return true; });
  }
  writer.publish();
}

int64_t dataset_size() { return data::Dataset::open({(testing::assets_dir() / "data").string()}).size(); }

uint64_t dataset_tokens() {
  const auto dataset = data::Dataset::open({(testing::assets_dir() / "data").string()});
  const auto lengths = dataset.lengths();
  return std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
}

std::string error_of(const config::Config& config, const nodes::FillOptions& options) {
  try {
    nodes::fill_feature_cache(config, options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Capture.the_graph_writes_the_records_the_serial_loop_wrote") {
  const auto run_dir = fresh_dir("cap-eq"), serial = fresh_dir("cap-eq-serial");
  auto config = small_run_config(run_dir, {"train.epochs=1", "run.threads=2"});
  serial_fill(config, serial);
  const data::FeatureCacheReader expected(serial);
  const int64_t samples = dataset_size();
  REQUIRE(expected.num_samples() == samples);

  SUBCASE("one target replica") {}
  SUBCASE("two target replicas, each batch to the less loaded one") {
    config.devices.target = {"cpu", "cpu"};
    for (auto& node : config.pipeline.nodes)
      if (node.name == "target") node.replicas = 2;
  }
  const auto cache = fresh_dir("cap-eq-graph");
  const auto report = nodes::fill_feature_cache(config, fill_options(cache));
  CHECK(report.samples_written == samples);
  const data::FeatureCacheReader written(cache);
  REQUIRE(written.num_samples() == samples);
  int64_t equal = 0;
  for (int64_t id = 0; id < samples; ++id) {
    const auto a = expected.get(id), b = written.get(id);
    equal += a.rows == b.rows && a.tokens_hash == b.tokens_hash &&
             std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin(), b.bytes.end());
  }
  CHECK(equal == samples);  // float32: every record byte for byte
}

TEST_CASE("Capture.a_failed_capture_continues_without_computing_a_published_sample_again") {
  const auto run_dir = fresh_dir("cap-resume"), cache = fresh_dir("cap-resume-cache");
  auto failing = small_run_config(run_dir, {"train.epochs=1"});
  config::FaultDecl fault;
  fault.kind = "exception";
  fault.node = "target";
  fault.step = 9;  // the capture's 10th batch: a few 1 MiB shards are published by then
  failing.faults.push_back(fault);
  const auto message = error_of(failing, fill_options(cache));
  CHECK(message.find("cache-features: ") != std::string::npos);
  CHECK(message.find("node 'target'") != std::string::npos);
  CHECK(message.find(" of epoch 0 (") != std::string::npos);  // names the batch
  CHECK(message.find("injected fault") != std::string::npos);
  CHECK(message.find("shard(s) this run published are kept; run the same command again to continue") !=
        std::string::npos);
  const int64_t published = data::FeatureCacheReader(cache).num_samples();
  const int64_t samples = dataset_size();
  CHECK(published > 0);
  CHECK(published < samples);

  const auto rerun = nodes::fill_feature_cache(small_run_config(run_dir, {"train.epochs=1"}), fill_options(cache));
  CHECK(rerun.samples_written == samples - published);  // nothing published is written again
  CHECK(rerun.cached_samples == samples);
  CHECK(rerun.tokens_computed < static_cast<int64_t>(dataset_tokens()));  // the published batches are not run
  // And a third run has nothing to compute.
  const auto third = nodes::fill_feature_cache(small_run_config(run_dir, {"train.epochs=1"}), fill_options(cache));
  CHECK(third.samples_written == 0);
  CHECK(third.batches_computed == 0);
}

TEST_CASE("Capture.two_ranks_split_the_batches_and_fill_the_cache_together") {
  const auto run_dir = fresh_dir("cap-ranks"), cache = fresh_dir("cap-ranks-cache");
  const auto config = small_run_config(run_dir, {"train.epochs=1"});
  const auto first = nodes::fill_feature_cache(config, fill_options(cache, 0, 2));
  const int64_t samples = dataset_size();
  CHECK(first.samples_written > 0);
  CHECK(first.samples_written < samples);
  CHECK(first.cached_samples == first.samples_written);
  const auto second = nodes::fill_feature_cache(config, fill_options(cache, 1, 2));
  CHECK(second.samples_written == samples - first.samples_written);  // no sample written by both
  CHECK(second.cached_samples == samples);
  int r0 = 0, r1 = 0;
  for (const auto& e : fs::directory_iterator(cache / "shards")) {
    const auto name = e.path().filename().string();
    r0 += name.rfind("r0-", 0) == 0, r1 += name.rfind("r1-", 0) == 0;
  }
  CHECK(r0 > 0);
  CHECK(r1 > 0);
}

TEST_CASE("Capture.with_several_ranks_the_disk_must_hold_every_ranks_share") {
  const auto run_dir = fresh_dir("cap-space"), cache = fresh_dir("cap-space-cache");
  const auto config = small_run_config(run_dir, {"train.epochs=1"});
  // float32, 3 feature layers of the tiny target's hidden size, every token.
  auto probe = fill_options(cache);
  probe.free_bytes = [](const fs::path&) { return uint64_t{0}; };
  CHECK(!error_of(config, probe).empty());  // creates the manifest, writes nothing
  const uint64_t row_bytes =
      data::feature_row_bytes(data::FeatureDtype::float32, data::FeatureCacheReader(cache).manifest().width());
  const uint64_t all = dataset_tokens() * row_bytes;
  // Room for a bit more than one rank's half: each rank alone would fit.
  const uint64_t free = all * 6 / 10;
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    auto options = fill_options(cache, rank, 2);
    options.free_bytes = [free](const fs::path&) { return free; };
    const auto e = error_of(config, options);
    CHECK(e.find("needs " + data::format_bytes(all) + " more") != std::string::npos);  // the total
    CHECK(e.find("the 2 ranks' shares") != std::string::npos);
    CHECK(e.find("the disk has " + data::format_bytes(free) + " free") != std::string::npos);
  }
  CHECK(data::FeatureCacheReader(cache).num_samples() == 0);  // refused before computing
  // Once rank 0's share is on disk, what is left fits: rank 1 runs.
  auto rank0 = fill_options(cache, 0, 2);
  rank0.free_bytes = [all](const fs::path&) { return all; };
  nodes::fill_feature_cache(config, rank0);
  auto rank1 = fill_options(cache, 1, 2);
  rank1.free_bytes = [free](const fs::path&) { return free; };
  CHECK(nodes::fill_feature_cache(config, rank1).cached_samples == dataset_size());
}

TEST_CASE("Capture.its_records_show_every_stage_and_where_it_waited") {
  const auto run_dir = fresh_dir("cap-records"), cache = fresh_dir("cap-records-cache");
  const auto report = nodes::fill_feature_cache(small_run_config(run_dir, {"train.epochs=1"}), fill_options(cache));
  REQUIRE(report.batches_computed > 0);
  CHECK(fs::path(report.run_dir) == run_dir / "cache-features");  // beside the training run's records, not in them
  CHECK(!fs::exists(run_dir / "metrics.jsonl"));
  const auto run = report::load_run(report.run_dir);
  CHECK(static_cast<int64_t>(run.steps.size()) == report.batches_computed);  // one record a batch
  CHECK(run.steps.back()["samples_written_total"] == report.samples_written);
  CHECK(!run.graph.is_null());
  REQUIRE(run.last_telemetry() != nullptr);
  // The final telemetry: every stage ran once a batch, every edge has its wait fields.
  std::map<std::string, int64_t> calls;
  for (const auto& node : report.telemetry["nodes"]) calls[node["name"]] += node["calls"].get<int64_t>();
  CHECK(calls["pad"] == report.batches_computed);
  CHECK(calls["target"] == report.batches_computed);
  CHECK(calls["write"] == report.batches_computed);
  bool into_writer = false;
  for (const auto& edge : report.telemetry["edges"]) {
    CHECK(edge.contains("producer_blocked_s"));
    CHECK(edge.contains("consumer_starved_s"));
    if (edge["name"] == "target.out->write.in") into_writer = edge["items_passed"] == report.batches_computed;
  }
  CHECK(into_writer);
  CHECK(!report.findings.empty());  // the report's words on where it waited
}

TEST_CASE("Capture.its_pipeline_is_the_runs_own_up_to_the_target_then_the_writer") {
  const auto config = config::load_config("", {});  // the demo's pipeline
  const auto capture = nodes::capture_pipeline(config.pipeline, nodes::default_registry());
  std::vector<std::string> nodes;
  for (const auto& node : capture.nodes) nodes.push_back(node.name + " " + node.type);
  CHECK(nodes == std::vector<std::string>{"load capture.load", "pad pad_bucket.token_budget", "route route.least_loaded",
                                          "target target_forward.capture", "write capture.write"});
  std::vector<std::string> edges;
  for (const auto& edge : capture.edges) edges.push_back(edge.from + "->" + edge.to + " " + std::to_string(edge.capacity));
  CHECK(edges == std::vector<std::string>{"load->pad 8", "pad->route 4", "route->target 2", "target->write 4"});

  // The training pipeline it came from keeps its source's params (yaml-cpp
  // nodes share their data between copies).
  auto cached = config.pipeline;
  auto target_of = [](const config::PipelineConfig& p) {
    return *std::find_if(p.nodes.begin(), p.nodes.end(), [](const auto& n) { return n.name == "target"; });
  };
  for (auto& node : cached.nodes)
    if (node.name == "target") node.type = "features.cached", node.params.reset(YAML::Load("{dir: /tmp/features}"));
  const auto cached_capture = nodes::capture_pipeline(cached, nodes::default_registry());
  CHECK(target_of(cached_capture).type == "target_forward.capture");
  CHECK(target_of(cached_capture).params.size() == 0);
  REQUIRE(target_of(cached).params["dir"]);
  CHECK(target_of(cached).params["dir"].as<std::string>() == "/tmp/features");

  auto without_target = config.pipeline;
  std::erase_if(without_target.nodes, [](const config::NodeDecl& n) { return n.name == "target"; });
  try {
    nodes::capture_pipeline(without_target, nodes::default_registry());
    FAIL("a pipeline without a feature source was accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("no feature source whose target the capture can run (a node of type features.cached or "
                                      "target_forward)") != std::string::npos);
  }
}

TEST_CASE("Capture.each_nodes_part_in_it_is_what_its_kind_declares") {
  // Kinds the capture has never heard of, registered under names of their
  // own: the loader and the feature source are found by what they declare
  // (RunHooks::capture), never by their type's name.
  graph::NodeRegistry kinds;
  nodes::register_all_nodes(kinds);
  register_renamed(kinds, "load.shards", "load.mine");
  register_renamed(kinds, "target_forward", "forward.mine");
  auto config = config::load_config("", {});
  for (auto& node : config.pipeline.nodes) {
    if (node.name == "load") node.type = "load.mine";
    if (node.name == "target") node.type = "forward.mine";
  }
  const auto capture = nodes::capture_pipeline(config.pipeline, kinds);
  std::vector<std::string> nodes;
  for (const auto& node : capture.nodes) nodes.push_back(node.name + " " + node.type);
  CHECK(nodes == std::vector<std::string>{"load capture.load", "pad pad_bucket.token_budget", "route route.least_loaded",
                                          "target target_forward.capture", "write capture.write"});

  // The same kind without the declaration is neither.
  graph::NodeSpec plain = *kinds.find("target_forward");
  plain.type = "forward.plain";
  nodes::add_node_kind(kinds, std::move(plain), nodes::RunHooks{});
  for (auto& node : config.pipeline.nodes)
    if (node.name == "target") node.type = "forward.plain";
  try {
    nodes::capture_pipeline(config.pipeline, kinds);
    FAIL("a pipeline whose feature source declares no part in the capture was accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("(a node of type features.cached or forward.mine or target_forward)") !=
          std::string::npos);
  }
}

TEST_CASE("Capture.fills_the_cache_a_kind_declares_it_reads") {
  // `dflow cache-features` fills the cache of the node whose kind declares
  // it reads one (RunHooks::feature_cache), whatever its type's name.
  graph::NodeRegistry kinds;
  nodes::register_all_nodes(kinds);
  register_renamed(kinds, "features.cached", "features.mine");
  auto config = config::load_config("", {});
  CHECK_FALSE(nodes::cached_features_node(config, kinds));  // target_forward reads none
  for (auto& node : config.pipeline.nodes)
    if (node.name == "target")
      node.type = "features.mine", node.params.reset(YAML::Load("{dir: cache-of-mine, dtype: float8_e4m3}"));
  const auto params = nodes::cached_features_node(config, kinds);
  REQUIRE(params);
  CHECK(params->dir == "cache-of-mine");
  CHECK(params->dtype == "float8_e4m3");
}
