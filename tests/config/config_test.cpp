// Config: defaults, round trip, overrides and every validation rule's message.
#include <doctest/doctest.h>

#include <fstream>

#include "config/config.hpp"
#include "config_error_of.hpp"

using dflow::ConfigError;
using dflow::config::load_config;
using dflow::config::load_config_text;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return dflow::testing::config_error_of(yaml, overrides);
}
}  // namespace

TEST_CASE("Config.Default.is_the_demo") {
  auto c = load_config("");
  CHECK(c.source == "<default>");
  CHECK(c.run.name == "demo");
  CHECK(c.run.threads == 2);
  CHECK(c.model.drafter.block_size == 16);
  CHECK(c.pipeline.nodes.size() == 11);
  CHECK(c.pipeline.nodes.front().name == "load");
  CHECK_FALSE(c.pipeline.from_default);  // the default file declares its pipeline
}

TEST_CASE("Config.Pipeline.absent_section_uses_default_graph") {
  auto c = load_config_text("run: {name: x}\n", "x.yaml");
  CHECK(c.pipeline.from_default);
  CHECK(c.pipeline.edges.size() == load_config("").pipeline.edges.size());
  CHECK(c.pipeline.nodes.size() == load_config("").pipeline.nodes.size());
  // Its eval node without held-out prompts is accepted (eval.every_steps 0):
  // the run leaves it out and says so (Cli.Eval.without_prompts_*).
  CHECK(c.pipeline.nodes.back().type == "eval.tau");
}

TEST_CASE("Config.Eval.an_eval_node_without_prompts_is_refused_only_when_every_steps_asks_for_tau") {
  const std::string node = "pipeline:\n  nodes:\n    - {name: load, type: load.shards}\n"
                           "    - {name: tau, type: eval.tau}\n  edges: []\n";
  CHECK_NOTHROW(load_config_text(node, "x.yaml"));
  CHECK_NOTHROW(load_config_text("eval: {every_steps: 0, prompts: \"\"}\n" + node, "x.yaml"));
  CHECK_NOTHROW(load_config_text("eval: {every_steps: 5, prompts: held-out.jsonl}\n" + node, "x.yaml"));
  const std::string msg = error_of("eval: {every_steps: 5}\n" + node);
  CHECK(msg.find("test.yaml:5:7: pipeline.nodes[1]: node 'tau' (eval.tau) measures tau on held-out prompts, but neither "
                 "its params.prompts nor eval.prompts is set while eval.every_steps 5 asks for tau every 5 steps") == 0);
  CHECK(msg.find("or set eval.every_steps: 0 to train without evaluation") != std::string::npos);
  // The node's own prompts are prompts too; an empty string is none.
  auto with_own = [](const std::string& prompts) {
    return "eval: {every_steps: 5}\npipeline:\n  nodes:\n    - {name: tau, type: eval.tau, params: {prompts: " + prompts +
           "}}\n  edges: []\n";
  };
  CHECK_NOTHROW(load_config_text(with_own("p.jsonl"), "x.yaml"));
  CHECK(error_of(with_own("''")).find("neither its params.prompts") != std::string::npos);
  // The default pipeline is no exception: every_steps asks for tau.
  CHECK(error_of("eval: {every_steps: 5}\n").find("node 'eval' (eval.tau) measures tau") != std::string::npos);
}

TEST_CASE("Config.ToYaml.round_trips") {
  auto c = load_config("", {"train.lr=0.00123", "data.buckets=[32, 64, 512]"});
  auto again = load_config_text(dflow::config::to_yaml(c), "resolved.yaml");
  CHECK(again.train.lr == doctest::Approx(0.00123));
  CHECK(again.data.buckets == std::vector<int>{32, 64, 512});
  CHECK(dflow::config::to_yaml(again) == dflow::config::to_yaml(c));
}

TEST_CASE("Config.Set.overrides_are_typed") {
  auto c = load_config("", {"train.lr=0.5", "run.threads=1", "devices.target=[cpu, cpu]"});
  CHECK(c.train.lr == 0.5);
  CHECK(c.run.threads == 1);
  CHECK(c.devices.target.size() == 2);
  auto msg = error_of("{}", {"train.lr=abc"});
  CHECK(msg.find("--set train.lr=abc") != std::string::npos);
  CHECK(msg.find("train.lr: expected a number, got 'abc'") != std::string::npos);
  CHECK(error_of("{}", {"train.epochs=2.5"}).find("train.epochs: expected an integer, got '2.5'") != std::string::npos);
  CHECK(error_of("{}", {"train.lrr=1"}).find("unknown key 'train.lrr', did you mean 'train.lr'?") != std::string::npos);
  CHECK(error_of("{}", {"trainlr"}).find("expected section.key=value") != std::string::npos);
}

TEST_CASE("Config.Errors.unknown_key_names_file_line_column_and_suggestion") {
  auto msg = error_of("run: {name: x}\ntrian:\n  lr: 1\n");
  CHECK(msg == "test.yaml:2:1: unknown key 'trian', did you mean 'train'?");
  msg = error_of("train:\n  epochs: 2\n  warmup_ration: 0.1\n");
  CHECK(msg == "test.yaml:3:3: unknown key 'train.warmup_ration', did you mean 'train.warmup_ratio'?");
  CHECK(error_of("zzzzzz: 1\n") == "test.yaml:1:1: unknown key 'zzzzzz'");
}

TEST_CASE("Config.Errors.unknown_key_points_to_the_section_that_has_it") {
  CHECK(error_of("{}", {"train.max_steps=3"}) ==
        "--set train.max_steps=3: unknown key 'train.max_steps', did you mean 'run.max_steps'?");
  CHECK(error_of("run:\n  epochs: 2\n") == "test.yaml:2:3: unknown key 'run.epochs', did you mean 'train.epochs'?");
  CHECK(error_of("model:\n  num_layers: 2\n") ==
        "test.yaml:2:3: unknown key 'model.num_layers', did you mean 'model.drafter.num_layers'?");
  CHECK(error_of("max_steps: 3\n") == "test.yaml:1:1: unknown key 'max_steps', did you mean 'run.max_steps'?");
}

TEST_CASE("Config.Errors.wrong_types") {
  CHECK(error_of("train:\n  lr: fast\n") == "test.yaml:2:7: train.lr: expected a number, got 'fast'");
  CHECK(error_of("run: {threads: [1, 2]}\n").find("run.threads: expected an integer, got a list") != std::string::npos);
  CHECK(error_of("data: {buckets: [64, x]}\n").find("data.buckets[1]: expected an integer, got 'x'") != std::string::npos);
  CHECK(error_of("train: 3\n").find("train: expected a mapping of keys") != std::string::npos);
  CHECK(error_of("run: {name: [x\n").find("test.yaml:") == 0);  // YAML syntax error has a place
}

TEST_CASE("Config.Errors.out_of_range_values") {
  struct Case { const char* yaml; const char* expected; };
  const Case cases[] = {
      {"train: {lr: 0}", "train.lr: must be > 0"},
      {"train: {lr: -1.0}", "train.lr: must be > 0"},
      {"train: {epochs: 0}", "train.epochs: must be >= 1"},
      {"train: {grad_accum: 0}", "train.grad_accum: must be >= 1"},
      {"train: {warmup_ratio: 1.5}", "train.warmup_ratio: must lie in [0, 1)"},
      {"train: {schedule: cosin}", "train.schedule: 'cosin' is not one of: cosine, linear, constant, did you mean 'cosine'?"},
      {"train: {anchors_per_sequence: 0}", "train.anchors_per_sequence: must be >= 1"},
      {"train: {loss_decay_gamma: 0}", "train.loss_decay_gamma: must be > 0"},
      {"train: {adam_beta2: 1.0}", "train.adam_beta2: must lie in [0, 1)"},
      {"model: {drafter: {block_size: 1}}", "model.drafter.block_size: must be >= 2"},
      {"model: {drafter: {num_layers: 0}}", "model.drafter.num_layers: must be >= 1"},
      {"model: {drafter: {target_layer_ids: [5, 1]}}", "model.drafter.target_layer_ids: must be non-negative and sorted"},
      {"model: {target: {dtype: fp8}}", "model.target.dtype: 'fp8' is not one of: float32, bfloat16"},
      {"data: {buckets: [128, 64]}", "data.buckets: must be strictly increasing"},
      {"data: {buckets: [64, 128], max_length: 512}", "data.buckets: the largest bucket (128) must hold max_length (512)"},
      {"data: {tokens_per_batch: 100}", "data.tokens_per_batch: must fit at least one sample of the largest bucket (512)"},
      {"data: {train: []}", "data.train: needs at least one prepared data directory"},
      {"run: {threads: 0}", "run.threads: must lie in [1, 256]"},
      {"run: {log_level: loud}", "run.log_level: 'loud' is not one of"},
      {"guard: {policy: ignore}", "guard.policy: 'ignore' is not one of: none, halt, skip, quarantine, rollback"},
      {"guard: {policy: rollback, window: 6, cliff_steps: 3}", "guard.window: must be > 2 * guard.cliff_steps (6)"},
      {"guard: {snapshot_every: 0}", "guard.snapshot_every: must be >= 1"},
      {"checkpoint: {keep: 0}", "checkpoint.keep: must be >= 1"},
      {"checkpoint: {on_write_error: retry}", "checkpoint.on_write_error: 'retry' is not one of: halt, continue"},
      {"metrics: {sinks: [jsonl, tensorbord]}", "metrics.sinks: 'tensorbord' is not one of: jsonl, console, tensorboard, did you mean 'tensorboard'?"},
      {"devices: {drafter: tpu}", "devices.drafter: 'tpu' is not a device (cpu, cuda, cuda:N)"},
      {"distributed: {backend: mpi}", "distributed.backend: 'mpi' is not one of: auto, gloo, nccl"},
      {"distributed: {timeout_s: 0}", "distributed.timeout_s: must be >= 1 second"},
      {"distributed: {bucket_mb: 0}", "distributed.bucket_mb: must lie in (0, 4096]"},
      {"distributed: {timeout: 5}", "unknown key 'distributed.timeout', did you mean 'distributed.timeout_s'?"},
      {"pipeline: {nodes: [{name: a, type: b}], edges: [{from: a, to: b, capacity: 0}]}",
       "pipeline.edges[0].capacity: every edge is bounded: capacity must be >= 1"},
      {"pipeline: {nodes: [{name: a, type: b}], edges: [{from: a, to: b}]}",
       "pipeline.edges[0].capacity: every edge is bounded: capacity must be >= 1"},
      {"pipeline: {nodes: [{name: a, type: b, replicas: 0}], edges: []}", "pipeline.nodes[0].replicas: must be >= 1"},
      {"pipeline: {nodes: [{name: a, type: b}], edges: [{from: a, to: b, capacity: 1, initial: 1}]}",
       "pipeline.edges[0].initial: only a token edge (token: true) starts with tokens"},
      {"pipeline: {nodes: [{name: a, typ: b}], edges: []}", "unknown key 'pipeline.nodes[0].typ', did you mean 'pipeline.nodes[0].type'?"},
  };
  for (const auto& c : cases) {
    std::string yaml = c.yaml;
    CAPTURE(yaml);
    auto msg = error_of(c.yaml);
    CHECK_MESSAGE(msg.find(c.expected) != std::string::npos, msg);
    CHECK_MESSAGE(msg.rfind("test.yaml:1:", 0) == 0, msg);  // every message has file:line:column
  }
}

TEST_CASE("Config.Errors.sliding_window_layers") {
  struct Case { const char* yaml; const char* expected; };
  const Case cases[] = {
      {"model: {drafter: {num_layers: 2, layer_types: [sliding_attention]}}",
       "model.drafter.layer_types: has 1 entries but num_layers is 2: give one type per draft layer"},
      {"model: {drafter: {layer_types: [sliding_atention]}}",
       "model.drafter.layer_types: 'sliding_atention' is not one of: full_attention, sliding_attention, did you mean "
       "'sliding_attention'?"},
      {"model: {drafter: {layer_types: [sliding_attention]}}",
       "model.drafter.sliding_window: is 0, but layer_types has sliding_attention layers: a window of 0"},
      {"model: {drafter: {layer_types: [sliding_attention], sliding_window: 0}}",
       "model.drafter.sliding_window: is 0, but layer_types has sliding_attention layers: a window of 0"},
      {"model: {drafter: {layer_types: [sliding_attention], sliding_window: 8}}",
       "model.drafter.sliding_window: is 8, shorter than block_size (16): a window must cover at least one whole block"},
      {"model: {drafter: {sliding_window: -1}}", "model.drafter.sliding_window: must be >= 0"},
      {"model: {drafter: {layer_types: [full_attention], sliding_window: 2048}}",
       "model.drafter.sliding_window: is set but no layer slides"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.yaml);
    const auto msg = error_of(c.yaml);
    CHECK_MESSAGE(msg.find(c.expected) != std::string::npos, msg);
    CHECK_MESSAGE(msg.rfind("test.yaml:1:", 0) == 0, msg);
  }
  // SpecForge's Qwen3.6-27B shape: four sliding layers of 2048 and one full.
  const auto config = load_config_text(
      "model: {drafter: {num_layers: 5, sliding_window: 2048, layer_types: [sliding_attention, sliding_attention, "
      "sliding_attention, sliding_attention, full_attention]}}",
      "test.yaml", {});
  CHECK(config.model.drafter.layer_types.size() == 5);
  CHECK(config.model.drafter.sliding_window == 2048);
  const auto by_set = load_config_text("{}", "test.yaml",
                                       {"model.drafter.num_layers=2", "model.drafter.sliding_window=32",
                                        "model.drafter.layer_types=[sliding_attention, full_attention]"});
  CHECK(by_set.model.drafter.layer_types == std::vector<std::string>{"sliding_attention", "full_attention"});
}

TEST_CASE("Config.File.missing_file_is_a_clear_error") {
  CHECK_THROWS_WITH_AS(load_config("/nonexistent/dflow.yaml"), "cannot open config file '/nonexistent/dflow.yaml'",
                       ConfigError);
}

TEST_CASE("Config.Faults.off_by_default_and_validated") {
  CHECK(load_config("").faults.empty());
  auto c = load_config_text("faults: [{kind: exception, node: target, step: 3}]\n", "f.yaml");
  REQUIRE(c.faults.size() == 1);
  CHECK(c.faults[0].node == "target");
  CHECK(c.faults[0].step == 3);
  CHECK(error_of("faults: [{kind: boom, step: 1}]\n").find("faults[0].kind: 'boom' is not one of") != std::string::npos);
  CHECK(error_of("faults: [{kind: delay, step: 1}]\n").find("faults[0].node: names the node to fault") != std::string::npos);
  // On every rank unless one is named; the rank survives the round trip.
  CHECK(c.faults[0].rank == -1);
  auto one_rank = load_config_text("faults: [{kind: delay, node: drafter, step: 2, seconds: 60, rank: 1}]\n", "f.yaml");
  CHECK(one_rank.faults[0].rank == 1);
  CHECK(load_config_text(to_yaml(one_rank), "round-trip").faults[0].rank == 1);
  CHECK(error_of("faults: [{kind: delay, node: drafter, step: 1, rank: -2}]\n").find("faults[0].rank: must be a rank") !=
        std::string::npos);
}
