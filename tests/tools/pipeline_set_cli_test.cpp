// --set of pipeline nodes and edges on the command line: `dflow config`
// prints the result and checks node params as `dflow graph` and a run do,
// before any model loads.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {
testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 120);
}
}  // namespace

TEST_CASE("Cli.PipelineSet.config_prints_the_swapped_nodes_and_edges") {
  auto o = run_dflow("config --set pipeline.nodes.target.type=features.cached --set pipeline.nodes.target.params.dir=cache "
                     "--set 'pipeline.edges.load->pad.capacity=32' --set pipeline.nodes.drafter.params.objective=dpace");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  CHECK(o.output.find("{name: target, type: features.cached, params: {dir: cache}}") != std::string::npos);
  CHECK(o.output.find("{from: load, to: pad, capacity: 32}") != std::string::npos);
  CHECK(o.output.find("{name: drafter, type: drafter_step, params: {objective: dpace}}") != std::string::npos);
}

TEST_CASE("Cli.PipelineSet.node_params_are_checked_by_config_graph_and_train") {
  const std::string bad = " --set pipeline.nodes.drafter.params.objective=dpce";
  for (const std::string command : {"config", "graph"}) {
    CAPTURE(command);
    auto o = run_dflow(command + bad);
    CHECK(o.exit_code == 2);
    CHECK_MESSAGE(o.output.find("--set pipeline.nodes.drafter.params.objective=dpce: pipeline.nodes[5].params.objective: "
                                "'dpce' is not one of") != std::string::npos,
                  o.output);
  }
  auto type = run_dflow("config --set pipeline.nodes.optimizer.type=optimizer_step.adamv");
  CHECK(type.exit_code == 2);
  CHECK_MESSAGE(type.output.find("--set pipeline.nodes.optimizer.type=optimizer_step.adamv: pipeline.nodes[7].type: unknown "
                                 "node type 'optimizer_step.adamv', did you mean 'optimizer_step.adamw'?") != std::string::npos,
                type.output);
  auto node = run_dflow("config --set pipeline.nodes.targte.replicas=2");
  CHECK(node.exit_code == 2);
  CHECK(node.output.find("no node named 'targte' in the pipeline, did you mean 'target'?") != std::string::npos);
  // A run refuses it before it loads a model or makes its out_dir.
  const fs::path out = testing::fresh_dir("pipeline-set-train") / "run";
  auto train = run_dflow("train --set run.out_dir=" + out.string() + " --set model.target.path=" + (out / "none").string() + bad);
  CHECK(train.exit_code == 2);
  CHECK(train.output.find("'dpce' is not one of") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
