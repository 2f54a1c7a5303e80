// The default pipeline (config/default.yaml) is expressible, and exports of a
// declaration need no node body (no model loading).
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "graph/builtin_nodes.hpp"
#include "graph/export.hpp"
#include "test_nodes.hpp"

using namespace dflow;
using namespace dflow::graph;

namespace {
// The default pipeline's node types with plausible ports; their factories
// must never run during describe().
NodeRegistry default_shaped_registry() {
  NodeRegistry r;
  register_graph_nodes(r);
  auto never = [](NodeContext&) -> std::unique_ptr<NodeBody> { throw std::logic_error("describe() built a body"); };
  auto p = [](const char* name, const char* type, bool routed = false) { return PortSpec{.name = name, .type = type, .routed = routed}; };
  auto add = [&](const char* type, NodeKind kind, std::vector<PortSpec> in, std::vector<PortSpec> out) {
    r.add({.type = type, .description = std::string("stub ") + type, .kind = kind, .inputs = std::move(in), .outputs = std::move(out),
           .check_params = {}, .make = never});
  };
  add("load.shards", NodeKind::source, {}, {p("out", "PlannedBatch")});
  add("pad_bucket.token_budget", NodeKind::function, {p("in", "PlannedBatch")}, {p("out", "PaddedBatch")});
  add("route.least_loaded", NodeKind::router, {p("in", "PaddedBatch")}, {p("out", "PaddedBatch", true)});
  add("target_forward", NodeKind::function, {p("in", "PaddedBatch")}, {p("out", "ContextFeatures")});
  add("drafter_step", NodeKind::function, {p("batch", "ContextFeatures"), p("token", "ModelToken")}, {p("out", "MicroStep")});
  add("accumulate", NodeKind::function, {p("in", "MicroStep")}, {p("token", "ModelToken"), p("step", "StepGrads")});
  add("optimizer_step.adamw", NodeKind::function, {p("in", "StepGrads")},
      {p("token", "ModelToken"), p("record", "StepRecord"), p("snapshot", "Snapshot"), p("eval", "Snapshot")});
  add("metric_sample", NodeKind::function, {p("in", "StepRecord")}, {});
  add("checkpoint.async", NodeKind::function, {p("in", "Snapshot")}, {});
  add("eval.tau", NodeKind::function, {p("in", "Snapshot")}, {});
  return r;
}

config::PipelineConfig default_pipeline(int target_replicas) {
  std::ifstream file(::dflow::testing::source_dir() + "/config/default.yaml");
  REQUIRE(file.good());
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  config::PipelineConfig pipeline = graph::testing::pipeline_from_yaml(text, "config/default.yaml");
  for (auto& n : pipeline.nodes)
    if (n.name == "target") n.replicas = target_replicas;
  return pipeline;
}
}  // namespace

TEST_CASE("Graph.Export.default_pipeline_dot") {
  NodeRegistry registry = default_shaped_registry();
  GraphDescription d = describe(default_pipeline(2), registry);
  CHECK(d.nodes.size() == 11);
  CHECK(d.edges.size() == 12);
  std::string dot = to_dot(d);
  CHECK(dot.find("digraph pipeline {") == 0);
  CHECK(dot.find("\"target\" [label=\"target\\ntarget_forward x2\", peripheries=2];") != std::string::npos);
  CHECK(dot.find("\"load\" -> \"pad\" [label=\"cap 8\"];") != std::string::npos);
  CHECK(dot.find("\"route\" -> \"target\" [label=\"cap 2 per replica\\nrouted\", style=bold];") != std::string::npos);
  CHECK(dot.find("\"target\" -> \"reorder\" [label=\"cap 4\\nordered\"];") != std::string::npos);
  CHECK(dot.find("\"optimizer\" -> \"drafter\" [label=\"token -> token\\ntoken cap 1, initial 1\", style=dashed, constraint=false];") !=
        std::string::npos);
  CHECK(dot.find("\"accumulate\" -> \"drafter\" [label=\"token -> token\\ntoken cap 1\", style=dashed") != std::string::npos);
  // Renders when graphviz is installed (it is optional for the test suite).
  if (std::system("command -v dot > /dev/null 2>&1") == 0) {
    std::string path = (std::filesystem::temp_directory_path() / ("dflow_graph_export_" + std::to_string(::getpid()) + ".dot")).string();
    std::ofstream(path) << dot;
    CHECK(std::system(("dot -Tsvg " + path + " -o " + path + ".svg").c_str()) == 0);
    std::remove(path.c_str());
    std::remove((path + ".svg").c_str());
  }
}

TEST_CASE("Graph.Export.default_pipeline_json") {
  NodeRegistry registry = default_shaped_registry();
  GraphDescription d = describe(default_pipeline(1), registry);
  nlohmann::json json = to_json(d);
  CHECK(json["nodes"].size() == 11);
  CHECK(json["nodes"][4]["name"] == "reorder");
  CHECK(json["nodes"][4]["outputs"][0]["type"] == "ContextFeatures");  // "*" resolved from target
  CHECK(json["nodes"][5]["inputs"][1]["name"] == "token");
  CHECK(json["edges"].size() == 12);
  const auto& token = json["edges"][8];
  CHECK(token["from"] == "optimizer.token");
  CHECK(token["to"] == "drafter.token");
  CHECK(token["token"] == true);
  CHECK(token["initial"] == 1);
  CHECK(json["edges"][3]["ordered"] == true);
  CHECK(json["edges"][3]["credit_taker"] == "route");  // taken at the fan-out, even to one replica
  CHECK(!json.contains("telemetry"));
  TelemetrySnapshot empty;
  CHECK(to_json(d, &empty).contains("telemetry"));
}

TEST_CASE("Graph.Export.json_carries_what_a_kind_declares_about_its_load") {
  // The report reads these from graph.json: a kind gets its words there by
  // declaring them, whatever its type's name.
  NodeRegistry registry = default_shaped_registry();
  NodeSpec reader = *registry.find("target_forward");
  reader.type = "features.mine";
  reader.when_bound = "That is my reader: give it faster storage.";
  registry.add(reader);
  NodeSpec forward = *registry.find("target_forward");
  forward.type = "forward.mine";
  forward.compute = true;
  registry.add(forward);
  auto target_of = [&](const std::string& type) {
    auto pipeline = default_pipeline(1);
    for (auto& n : pipeline.nodes)
      if (n.name == "target") n.type = type;
    return to_json(describe(pipeline, registry))["nodes"][3];
  };
  CHECK(target_of("features.mine")["when_bound"] == "That is my reader: give it faster storage.");
  CHECK(target_of("features.mine")["compute"] == false);
  CHECK(target_of("forward.mine")["compute"] == true);
  CHECK(target_of("forward.mine")["when_bound"] == "");
  CHECK(target_of("target_forward")["compute"] == false);  // the stub declares nothing
}
