// --set of pipeline nodes and edges by name (config/pipeline_override.hpp):
// what a user types to swap a node, retune its params or an edge, and the
// errors a typo gets.
#include <doctest/doctest.h>

#include "config/config.hpp"
#include "config/pipeline_override.hpp"
#include "config_error_of.hpp"

using dflow::config::load_config;
using dflow::config::load_config_text;
using dflow::config::NodeDecl;
using dflow::config::PipelineConfig;

namespace {

const NodeDecl& node_named(const PipelineConfig& p, const std::string& name) {
  for (const auto& n : p.nodes)
    if (n.name == name) return n;
  FAIL("no node " << name);
  return p.nodes.front();
}

int capacity_of(const PipelineConfig& p, const std::string& from, const std::string& to) {
  for (const auto& e : p.edges)
    if (e.from == from && e.to == to) return e.capacity;
  FAIL("no edge " << from << "->" << to);
  return 0;
}

// A config file without a pipeline section: --set edits the default graph.
const char* kNoPipeline = "run: {name: x}\neval: {prompts: heldout.jsonl}\n";

}  // namespace

TEST_CASE("Config.PipelineSet.swaps_a_node_type") {
  auto c = load_config("", {"pipeline.nodes.target.type=features.cached", "pipeline.nodes.optimizer.type=optimizer_step.muon"});
  CHECK(node_named(c.pipeline, "target").type == "features.cached");
  CHECK(node_named(c.pipeline, "optimizer").type == "optimizer_step.muon");
  CHECK(node_named(c.pipeline, "pad").type == "pad_bucket.token_budget");  // the others as declared
  CHECK(c.pipeline.nodes.size() == load_config("").pipeline.nodes.size());
}

TEST_CASE("Config.PipelineSet.params_keys_and_whole_params") {
  auto c = load_config("", {"pipeline.nodes.drafter.params.objective=dpace", "pipeline.nodes.drafter.params.alpha=0.5",
                            "pipeline.nodes.target.replicas=2"});
  const auto& drafter = node_named(c.pipeline, "drafter");
  REQUIRE(drafter.params.IsMap());
  CHECK(drafter.params["objective"].as<std::string>() == "dpace");
  CHECK(drafter.params["alpha"].as<double>() == doctest::Approx(0.5));
  CHECK(node_named(c.pipeline, "target").replicas == 2);
  auto whole = load_config("", {"pipeline.nodes.drafter.params={objective: dpace, alpha: 0.25}"});
  CHECK(node_named(whole.pipeline, "drafter").params["alpha"].as<double>() == doctest::Approx(0.25));
  // A nested key creates the mappings above it.
  auto nested = load_config("", {"pipeline.nodes.pad.params.a.b=3"});
  CHECK(node_named(nested.pipeline, "pad").params["a"]["b"].as<int>() == 3);
}

TEST_CASE("Config.PipelineSet.edge_capacity_by_its_ends") {
  auto c = load_config("", {"pipeline.edges.load->pad.capacity=32", "pipeline.edges.accumulate.step->optimizer.capacity=3",
                            "pipeline.edges.reorder->drafter.capacity=5"});  // a node alone: its one edge
  CHECK(capacity_of(c.pipeline, "load", "pad") == 32);
  CHECK(capacity_of(c.pipeline, "accumulate.step", "optimizer") == 3);
  CHECK(capacity_of(c.pipeline, "reorder", "drafter.batch") == 5);
  CHECK(capacity_of(c.pipeline, "pad", "route") == 4);  // untouched
}

TEST_CASE("Config.PipelineSet.without_a_pipeline_section_edits_the_default_graph") {
  auto plain = load_config_text(kNoPipeline, "x.yaml");
  CHECK(plain.pipeline.from_default);
  auto c = load_config_text(kNoPipeline, "x.yaml", {"pipeline.nodes.optimizer.type=optimizer_step.muon"});
  CHECK(c.pipeline.from_default);  // still the default graph (what a run says of it)
  CHECK(node_named(c.pipeline, "optimizer").type == "optimizer_step.muon");
  CHECK(c.pipeline.nodes.size() == plain.pipeline.nodes.size());
  // It round-trips: `dflow config` prints what was run.
  auto again = load_config_text(dflow::config::to_yaml(c), "again.yaml");
  CHECK(node_named(again.pipeline, "optimizer").type == "optimizer_step.muon");
}

TEST_CASE("Config.PipelineSet.errors_name_the_key_and_the_closest_names") {
  struct Case {
    const char* set;
    const char* expected;
  };
  const Case cases[] = {
      {"pipeline.nodes.targte.type=features.cached", "no node named 'targte' in the pipeline, did you mean 'target'?"},
      {"pipeline.nodes.zzz.type=x", "no node named 'zzz' in the pipeline; nodes: load, pad, route"},
      {"pipeline.nodes.target.typ=x", "a node has no key 'typ', did you mean 'type'?"},
      {"pipeline.nodes.target.name=t", "a node's name cannot be set"},
      {"pipeline.nodes.target.type.x=1", "'type' has no keys below it"},
      {"pipeline.nodes.target", "expected section.key=value"},
      {"pipeline.nodes.target=x", "expected pipeline.nodes.<name>.type, .replicas or .params.<key>"},
      {"pipeline.nodes.target.replicas=many", "pipeline.nodes[3].replicas: expected an integer"},
      {"pipeline.nodes.target.replicas=0", "pipeline.nodes[3].replicas: must be >= 1"},
      {"pipeline.edges.load->pda.capacity=4", "no edge load->pda in the pipeline, did you mean 'load->pad'?"},
      {"pipeline.edges.load-", "expected section.key=value"},
      {"pipeline.edges.load-=4", "the edge lost its '>': quote the whole --set argument"},
      {"pipeline.edges.load->pad.capacty=4", "an edge's 'capacity' is the key --set takes by its ends, not 'capacty', did "
                                             "you mean 'capacity'?"},
      {"pipeline.edges.load->pad.capacity=0", "pipeline.edges[0].capacity: every edge is bounded: capacity must be >= 1"},
      {"pipeline.edges.load->pad.capacity=big", "pipeline.edges[0].capacity: expected an integer"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.set);
    const std::string msg = dflow::testing::config_error_of("", {c.set}, "<default>");
    CHECK_MESSAGE(msg.find(c.expected) != std::string::npos, msg);
    CHECK_MESSAGE(msg.rfind(std::string("--set ") + c.set, 0) == 0, msg);  // located at the --set text
  }
}

TEST_CASE("Config.PipelineSet.ambiguous_ends_ask_for_ports") {
  const char* yaml =
      "pipeline:\n"
      "  nodes: [{name: a, type: t}, {name: b, type: t}]\n"
      "  edges: [{from: a.x, to: b.y, capacity: 1}, {from: a.z, to: b.w, capacity: 1}]\n";
  const std::string msg = dflow::testing::config_error_of(yaml, {"pipeline.edges.a->b.capacity=2"});
  CHECK_MESSAGE(msg.find("a->b names 2 edges (a.x->b.y, a.z->b.w): write their ports as declared") != std::string::npos, msg);
  auto c = load_config_text(yaml, "t.yaml", {"pipeline.edges.a.z->b.w.capacity=7"});
  CHECK(c.pipeline.edges[1].capacity == 7);
  CHECK(c.pipeline.edges[0].capacity == 1);
}

TEST_CASE("Config.PipelineSet.node_keys_are_read_in_one_place") {
  const auto params = dflow::config::parse_node_key("pipeline.nodes.drafter.params.objective");
  REQUIRE(params);
  CHECK(params->node == "drafter");
  CHECK(params->field == "params");
  CHECK(params->below == std::vector<std::string>{"objective"});
  const auto bare = dflow::config::parse_node_key("pipeline.nodes.target");
  REQUIRE(bare);
  CHECK(bare->field.empty());
  CHECK_FALSE(dflow::config::parse_node_key("pipeline.edges.load->pad.capacity"));
  CHECK_FALSE(dflow::config::parse_node_key("train.lr"));
}
