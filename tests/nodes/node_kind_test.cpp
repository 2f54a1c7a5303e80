// Node kinds own their run policies: a batching node picks the run's
// batching policy from its params, and a new way to batch is a policy class
// plus one registered kind, with nothing in the run context or the trainer
// naming it. The test's own kind proves it: it plans every epoch shortest
// sample first, trains, and resumes.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include <yaml-cpp/yaml.h>

#include "config/errors.hpp"
#include "data/batching_policy.hpp"
#include "data/data_error.hpp"
#include "graph/description.hpp"
#include "graph/export.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "report/analysis.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
using testing::with_pad;

namespace {

// Every sample in the order of its length, `rows` per batch padded to the longest.
class ShortestFirst final : public data::BatchingPolicy {
 public:
  explicit ShortestFirst(int rows) : rows_(rows) {}
  std::string name() const override { return "shortest_first"; }
  std::string params_text() const override { return "{rows: " + std::to_string(rows_) + "}"; }
  void check(const data::PlanOptions&) const override {
    if (rows_ < 1) throw data::DataError("rows must be at least 1");
  }
  std::vector<data::PlannedBatch> batches(std::span<const int32_t> lengths, const data::PlanOptions& options,
                                          uint64_t) const override {
    std::vector<int64_t> ids(lengths.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return lengths[a] < lengths[b]; });
    std::vector<data::PlannedBatch> out;
    for (size_t first = 0; first < ids.size(); first += static_cast<size_t>(rows_)) {
      data::PlannedBatch batch;
      batch.sample_ids.assign(ids.begin() + static_cast<ptrdiff_t>(first),
                              ids.begin() + static_cast<ptrdiff_t>(std::min(ids.size(), first + static_cast<size_t>(rows_))));
      for (const int64_t id : batch.sample_ids) {
        batch.padded_length = std::max(batch.padded_length, lengths[id]);
        batch.real_tokens += lengths[id];
      }
      while (options.buckets[static_cast<size_t>(batch.bucket_index)] < batch.padded_length) ++batch.bucket_index;
      batch.padded_tokens = batch.num_samples() * batch.padded_length;
      out.push_back(std::move(batch));
    }
    return out;
  }

 private:
  int rows_;
};

// The default kinds plus "pad_bucket.shortest_first": pad_bucket's body, this policy.
const graph::NodeRegistry& kinds_with_shortest_first() {
  static const graph::NodeRegistry registry = [] {
    graph::NodeRegistry r;
    nodes::register_all_nodes(r);
    graph::NodeSpec spec = *r.find("pad_bucket.fixed_batch");
    spec.type = "pad_bucket.shortest_first";
    spec.description = "params.rows samples per batch, shortest first";
    auto pick = [](config::YamlSection& params) -> std::shared_ptr<const data::BatchingPolicy> {
      int rows = 4;
      params.read("rows", rows);
      params.require(rows >= 1, "rows", "must be >= 1");
      return std::make_shared<ShortestFirst>(rows);
    };
    spec.check_params = [pick](config::YamlSection& params) { pick(params); };
    nodes::add_node_kind(r, std::move(spec), nodes::RunHooks{.batching = pick});
    return r;
  }();
  return registry;
}

config::Config with_shortest_first(config::Config config, int rows) {
  config = with_pad(std::move(config), "pad_bucket.shortest_first");
  for (auto& n : config.pipeline.nodes)
    if (n.name == "pad") n.params["rows"] = rows;
  return config;
}

std::vector<int64_t> sample_ids_in_order(const std::vector<nlohmann::json>& records) {
  std::vector<int64_t> ids;
  for (const auto& r : records)
    for (const auto& id : r["sample_ids"]) ids.push_back(id.get<int64_t>());
  return ids;
}

}  // namespace

TEST_CASE("NodeKinds.the_batching_node_picks_the_policy_from_its_params") {
  const auto& kinds = nodes::default_registry();
  auto config = small_run_config(fresh_dir("kinds-policy"));
  CHECK(nodes::batching_of(config.pipeline, kinds).signature() == "pad_bucket.token_budget");
  config = with_pad(config, "pad_bucket.fixed_batch");
  for (auto& n : config.pipeline.nodes)
    if (n.name == "pad") n.params["batch_size"] = 3;
  const auto fixed = nodes::batching_of(config.pipeline, kinds);
  CHECK(fixed.signature() == "pad_bucket.fixed_batch {batch_size: 3}");
  CHECK(fixed.policy->name() == "fixed_batch");
  CHECK(fixed.node == "pad");

  // Two batching nodes: the second is named.
  auto twice = config.pipeline;
  auto second = twice.nodes.front();
  for (const auto& n : twice.nodes)
    if (n.name == "pad") second = n;
  second.name = "pad2";
  twice.nodes.push_back(second);
  CHECK_THROWS_WITH_AS(nodes::batching_of(twice, kinds), doctest::Contains("node 'pad2' (pad_bucket.fixed_batch) forms batches, but node 'pad'"),
                       ConfigError);
}

TEST_CASE("NodeKinds.a_new_batching_policy_is_one_class_and_one_registration") {
  nodes::RunOptions options;
  options.registry = &kinds_with_shortest_first();
  const auto dir = fresh_dir("kinds-shortest");
  const auto result = nodes::run_training(with_shortest_first(small_run_config(dir, {"train.epochs=1"}), 5), options);
  const auto records = step_records(dir);
  REQUIRE(records.size() == static_cast<size_t>(result.total_steps));
  // The run trained on the policy's batches: 5 samples each, lengths never decreasing.
  const data::Dataset dataset = data::Dataset::open({(testing::assets_dir() / "data").string()});
  int32_t previous = 0;
  for (const auto& r : records) {
    CHECK(r["sample_ids"].size() <= 5u);
    for (const auto& id : r["sample_ids"]) {
      const int32_t length = dataset.lengths()[id.get<size_t>()];
      CHECK(length >= previous);
      previous = length;
    }
  }
  CHECK(sample_ids_in_order(records).size() == static_cast<size_t>(dataset.size()));
  CHECK(nodes::summarize(result).find("batching pad_bucket.shortest_first {rows: 5}") != std::string::npos);

  // It resumes like the built-in policies, and a resume under other params is refused.
  const auto split = fresh_dir("kinds-shortest-split");
  nodes::run_training(stopped_after(with_shortest_first(small_run_config(split, {"train.epochs=1"}), 5), 3), options);
  nodes::RunOptions resume = options;
  resume.resume = "latest";
  CHECK_THROWS_WITH_AS(nodes::run_training(with_shortest_first(small_run_config(split, {"train.epochs=1"}), 4), resume),
                       doctest::Contains("pipeline.nodes.pad (the batching policy): pad_bucket.shortest_first {rows: 5} "
                                         "-> pad_bucket.shortest_first {rows: 4}"),
                       ConfigError);
  nodes::run_training(with_shortest_first(small_run_config(split, {"train.epochs=1"}), 5), resume);
  CHECK(sample_ids_in_order(step_records(split)) == sample_ids_in_order(records));
}

TEST_CASE("NodeKinds.a_pipeline_without_a_batching_node_is_named_by_its_policy") {
  // Its plans use the token-budget policy; the resume check and the
  // summary name that policy, not a kind the pipeline does not declare.
  auto config = small_run_config(fresh_dir("kinds-no-batching"));
  std::erase_if(config.pipeline.nodes, [](const config::NodeDecl& n) { return n.name == "pad"; });
  const auto none = nodes::batching_of(config.pipeline, nodes::default_registry());
  CHECK(none.node.empty());
  CHECK(none.signature() == "token_budget");
  CHECK(none.policy->name() == "token_budget");
}

TEST_CASE("NodeKinds.the_report_reads_a_bound_node_as_its_kind_declares") {
  // The report's words on a node that bounds the run come from its kind's
  // registration, through graph.json (graph::NodeSpec::compute, when_bound).
  auto words_when_target_bounds = [](const std::string& type, const std::string& params) {
    auto config = config::load_config("", {});
    for (auto& n : config.pipeline.nodes)
      if (n.name == "target") n.type = type, n.params.reset(YAML::Load(params));
    const auto graph = graph::to_json(graph::describe(config.pipeline, nodes::default_registry()));
    const nlohmann::json telemetry = {
        {"elapsed_s", 10.0},
        {"nodes", {{{"name", "target"}, {"replicas", 1}, {"calls", 4}, {"busy_s", 9.5}}}},
        {"edges", nlohmann::json::array()}};
    const nlohmann::json step = {{"kind", "step"}, {"global_step", 4}, {"total_steps", 8}, {"telemetry", telemetry}};
    const auto a = report::analyze(report::pipeline_model(graph, &telemetry), {step});
    REQUIRE(a.bottleneck);
    return report::bottleneck_summary(a);
  };
  CHECK(words_when_target_bounds("target_forward", "{}").find("That is compute") != std::string::npos);
  CHECK(words_when_target_bounds("features.cached", "{dir: cache}").find("That is the feature cache's reader") !=
        std::string::npos);
  CHECK(words_when_target_bounds("features.engine", "{dir: files, engine_layer_ids: [1, 2, 3]}")
            .find("That is the reader of the engine's hidden-state files") != std::string::npos);
  CHECK(nodes::default_registry().find("drafter_step")->compute);
}
