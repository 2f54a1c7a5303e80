// `dflow cache-features` as a user sees its graph: `--set` addresses the
// run's own nodes and edges (the capture is derived from them), the summary
// says where the capture waited, and `dflow report` reads its records.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "data/feature_cache.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

TEST_CASE("Cli.CacheFeatures.set_addresses_the_runs_nodes_and_the_report_reads_the_capture") {
  const auto dir = testing::fresh_dir("cf-graph"), cache = dir / "cache";
  auto config = testing::small_run_config(dir / "run", {"run.threads=2", "train.epochs=1", "run.log_level=info"});
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") n.type = "features.cached", n.params.reset(YAML::Load("{dir: " + cache.string() + "}"));
  const auto file = dir / "run.yaml";
  std::ofstream(file) << config::to_yaml(config);
  const std::string dflow = ::dflow::testing::dflow_binary();
  auto o = testing::run_command(dflow + " cache-features " + file.string() +
                                    " --set 'devices.target=[cpu, cpu]' --set pipeline.nodes.target.replicas=2"
                                    " --set 'pipeline.edges.target->reorder.capacity=3'",
                                120);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(o.output.find("it holds 240 of the dataset's 240 samples") != std::string::npos);
  CHECK(o.output.find("where the capture waited:") != std::string::npos);
  CHECK(o.output.find("batches, ") != std::string::npos);  // the progress log
  CHECK(data::FeatureCacheReader(cache).num_samples() == 240);

  const auto run_dir = dir / "run" / "cache-features";
  const auto graph = nlohmann::json::parse(std::ifstream(run_dir / "graph.json"));
  std::map<std::string, nlohmann::json> nodes;
  for (const auto& n : graph["nodes"]) nodes[n["name"]] = n;
  CHECK(nodes.size() == 5);  // load, pad, route, target, write: the training tail is gone
  CHECK(nodes["target"]["replicas"] == 2);
  CHECK(nodes["target"]["type"] == "target_forward.capture");
  CHECK(nodes["write"]["type"] == "capture.write");
  CHECK(nodes["load"]["type"] == "capture.load");
  CHECK(nodes["pad"]["type"] == "pad_bucket.token_budget");
  int sink_capacity = 0;
  for (const auto& e : graph["edges"])
    if (e["to"] == "write.in") sink_capacity = e["capacity"];
  CHECK(sink_capacity == 3);  // the capacity of the edge out of the run's feature source

  o = testing::run_command(dflow + " report " + run_dir.string(), 120);
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(fs::exists(run_dir / "report.html"));
}
