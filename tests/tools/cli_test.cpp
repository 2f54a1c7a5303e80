// The dflow command as a user runs it: exit codes, one clear error line,
// failure in a node, and a crash in the middle of a checkpoint write.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <thread>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"
#include "train/checkpoint.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

using testing::Outcome;

// Runs `dflow ARGS` (stdout and stderr together).
Outcome run_dflow(const std::string& args) { return testing::run_command(::dflow::testing::dflow_binary() + " " + args); }

// A config file for a small run in `dir`, with extra YAML appended (faults).
fs::path write_config(const fs::path& dir, const std::vector<std::string>& overrides, const std::string& extra_yaml) {
  auto path = dir / "run.yaml";
  std::ofstream(path) << config::to_yaml(testing::small_run_config(dir, overrides)) << extra_yaml;
  return path;
}

}  // namespace

TEST_CASE("Cli.Config.bad_override_exits_2_naming_key_and_type") {
  auto o = run_dflow("config --set train.lr=abc");
  CHECK(o.exit_code == 2);
  CHECK(o.output.find("train.lr: expected a number, got 'abc'") != std::string::npos);
}

TEST_CASE("Cli.Config.typo_exits_2_with_place_and_suggestion") {
  auto dir = fresh_dir("typo");
  std::ofstream(dir / "bad.yaml") << "run:\n  name: x\ntrian:\n  lr: 0.1\n";
  auto o = run_dflow("config " + (dir / "bad.yaml").string());
  CHECK(o.exit_code == 2);
  CHECK(o.output.find((dir / "bad.yaml").string() + ":3:1: unknown key 'trian', did you mean 'train'?") !=
        std::string::npos);
}

TEST_CASE("Cli.Graph.prints_the_declared_graph") {
  auto o = run_dflow("graph --format dot");
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("digraph") != std::string::npos);
  CHECK(o.output.find("target_forward") != std::string::npos);
  auto bad = run_dflow("graph --set pipeline.nodes=[{name: a, type: load.shardz}]");
  CHECK(bad.exit_code == 2);
}

TEST_CASE("Cli.Train.exception_in_target_forward_names_node_and_batch") {
  auto dir = fresh_dir("fault");
  // The target runs at most a few batches ahead of the optimizer (bounded edges),
  // so by its failure at step 16 the snapshots of steps 2 and 4 have been taken.
  auto config = write_config(dir, {"checkpoint.every_steps=2"}, "faults: [{kind: exception, node: target, step: 15}]\n");
  auto started = std::chrono::steady_clock::now();
  auto o = run_dflow("train " + config.string());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(o.output);
  CHECK(o.exit_code == 1);
  CHECK(o.output.find("node 'target'") != std::string::npos);
  CHECK(o.output.find("batch 15 of epoch 0 (step 16") != std::string::npos);  // the batch
  CHECK(o.output.find("injected fault") != std::string::npos);
  CHECK(seconds < 60 * testing::time_scale());
  // The last good checkpoint is intact, and nothing partial looks valid.
  auto kept = train::list_checkpoints(dir / "checkpoints");
  REQUIRE_FALSE(kept.empty());
  CHECK_NOTHROW(train::read_checkpoint(train::resolve_checkpoint(dir / "checkpoints", "latest")));
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints"))
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("Cli.Train.sigkill_while_writing_a_checkpoint_keeps_latest_valid") {
  auto dir = fresh_dir("kill");
  auto config = write_config(dir, {"checkpoint.every_steps=5", "train.epochs=1"},
                             "faults: [{kind: delay, node: checkpoint, step: 9, seconds: 60}]\n");
  std::string command = "(exec " + ::dflow::testing::dflow_binary() + " train " + config.string() + " > " +
                        (dir / "log").string() + " 2>&1) & echo $! > " + (dir / "pid").string();
  REQUIRE(std::system(command.c_str()) == 0);
  int pid = 0;
  std::ifstream(dir / "pid") >> pid;
  REQUIRE(pid > 0);
  // Wait until step-10 is half written (its temporary directory exists).
  bool half_written = false;
  for (int i = 0; i < testing::scaled(1200) && !half_written; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fs::exists(dir / "checkpoints"))
      for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
        half_written = half_written || e.path().filename().string().rfind(".step-10.tmp", 0) == 0;
  }
  ::kill(pid, SIGKILL);
  REQUIRE(half_written);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto latest = train::resolve_checkpoint(dir / "checkpoints", "latest");
  CHECK(latest.filename() == "step-5");
  CHECK(train::read_checkpoint(latest).global_step == 5);
  // And it resumes (without the fault) to the end.
  auto resumed = write_config(dir, {"checkpoint.every_steps=5", "train.epochs=1", "run.max_steps=8"}, "");
  auto o = run_dflow("train " + resumed.string() + " --resume latest");
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("trained 8/") != std::string::npos);
}

TEST_CASE("Cli.Inspect.reports_step_and_finite_tensors") {
  auto dir = fresh_dir("inspect");
  auto config = write_config(dir, {"run.max_steps=3"}, "");
  REQUIRE(run_dflow("train " + config.string()).exit_code == 0);
  auto o = run_dflow("inspect " + (dir / "checkpoints" / "step-3").string());
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("global_step 3") != std::string::npos);
  CHECK(o.output.find("layers.0.self_attn.q_proj.weight") != std::string::npos);
  CHECK(o.output.find("all tensors finite") != std::string::npos);
}

TEST_CASE("Cli.Report.renders_a_recorded_run") {
  auto dir = fresh_dir("report");
  auto config = write_config(dir, {"run.max_steps=6"}, "");
  REQUIRE(run_dflow("train " + config.string()).exit_code == 0);
  CHECK(fs::exists(dir / "graph.json"));
  auto o = run_dflow("report " + dir.string() + " -o " + (dir / "r.html").string());
  INFO(o.output);
  CHECK(o.exit_code == 0);
  std::ifstream in(dir / "r.html");
  std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // One drawn element per declared node (10) and edge (11) of the default graph.
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("data-node=\"") >= 10);
  CHECK(count("data-edge=\"") >= 11);
  CHECK(html.find("target") != std::string::npos);
}

TEST_CASE("Cli.Train.live_view_answers_during_the_run") {
  auto dir = fresh_dir("live");
  auto config = write_config(dir, {"run.max_steps=40"}, "faults: [{kind: delay, node: drafter, step: 0, seconds: 0.1}]\n");
  const std::string address = "127.0.0.1:" + std::to_string(20000 + ::getpid() % 20000);
  std::string command = "(exec " + ::dflow::testing::dflow_binary() + " train " + config.string() + " --serve " + address +
                        " > " + (dir / "log").string() + " 2>&1) & echo $! > " + (dir / "pid").string();
  REQUIRE(std::system(command.c_str()) == 0);
  int pid = 0;
  std::ifstream(dir / "pid") >> pid;
  std::string metrics;
  for (int i = 0; i < testing::scaled(300) && metrics.find("dflow_global_step") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FILE* pipe = ::popen(("curl -s http://" + address + "/metrics").c_str(), "r");
    metrics.clear();
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) metrics.append(buffer, n);
    ::pclose(pipe);
  }
  ::kill(pid, SIGKILL);
  INFO(metrics);
  CHECK(metrics.find("# TYPE") != std::string::npos);
  CHECK(metrics.find("dflow_global_step") != std::string::npos);
}

TEST_CASE("Cli.Eval.export_and_regenerate_round_trip") {
  auto dir = fresh_dir("eval");
  auto config = write_config(dir, {"run.max_steps=4"}, "");
  REQUIRE(run_dflow("train " + config.string()).exit_code == 0);
  const auto target = (testing::assets_dir() / "target").string();
  std::ofstream(dir / "prompts.jsonl") << "{\"prompt_ids\": [5, 17, 99, 3, 42, 7, 8, 9]}\n"
                                       << "{\"prompt_ids\": [11, 12, 13, 200, 300, 4, 5, 6]}\n";
  // Speculative decoding is lossless and tau lies in [1, block size].
  auto json = (dir / "eval.json").string();
  auto o = run_dflow("eval --target " + target + " --drafter " + dir.string() + " --prompts " +
                     (dir / "prompts.jsonl").string() + " --max-new-tokens 24 --json " + json);
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("lossless: yes") != std::string::npos);
  auto report = nlohmann::json::parse(std::ifstream(json));
  CHECK(report["mean_tau"].get<double>() >= 1.0);
  CHECK(report["mean_tau"].get<double>() <= 16.0);
  // The exported drafter loads back and drafts exactly the same.
  REQUIRE(run_dflow("export " + dir.string() + " --out " + (dir / "exported").string()).exit_code == 0);
  auto json2 = (dir / "eval2.json").string();
  REQUIRE(run_dflow("eval --target " + target + " --drafter " + (dir / "exported").string() + " --prompts " +
                    (dir / "prompts.jsonl").string() + " --max-new-tokens 24 --json " + json2)
              .exit_code == 0);
  auto report2 = nlohmann::json::parse(std::ifstream(json2));
  CHECK(report2["tau_histogram"] == report["tau_histogram"]);
  // Speculative sampling at a temperature.
  auto sampled = run_dflow("eval --target " + target + " --drafter " + dir.string() + " --prompts " +
                           (dir / "prompts.jsonl").string() + " --max-new-tokens 24 --temperature 0.8 --seed 3 --json " +
                           (dir / "sampled.json").string());
  INFO(sampled.output);
  CHECK(sampled.exit_code == 0);
  CHECK(sampled.output.find("sampled at temperature") != std::string::npos);
  auto sampled_report = nlohmann::json::parse(std::ifstream(dir / "sampled.json"));
  CHECK(sampled_report["mean_tau"].get<double>() >= 1.0);
  CHECK(sampled_report["mean_tau"].get<double>() <= 16.0);
  // Regenerated data round-trips through prepare and trains.
  REQUIRE(run_dflow("regenerate --target " + target + " --prompts " + (dir / "prompts.jsonl").string() +
                    " --max-new-tokens 40 --out " + (dir / "regen.jsonl").string())
              .exit_code == 0);
  REQUIRE(run_dflow("prepare " + (dir / "regen.jsonl").string() + " --out " + (dir / "regen").string() +
                    " --max-length 128 --vocab-size 512")
              .exit_code == 0);
  auto regen_config = dir / "regen.yaml";
  std::ofstream(regen_config) << config::to_yaml(testing::small_run_config(
      dir / "regen-run", {"data.train=[" + (dir / "regen").string() + "]", "run.max_steps=2"}));
  auto trained = run_dflow("train " + regen_config.string());
  INFO(trained.output);
  CHECK(trained.exit_code == 0);
}

TEST_CASE("Cli.Replay.recomputes_chosen_samples_against_a_checkpoint") {
  auto dir = fresh_dir("replay");
  auto config = write_config(dir, {"run.max_steps=2"}, "");
  REQUIRE(run_dflow("train " + config.string()).exit_code == 0);
  auto ckpt = (dir / "checkpoints" / "step-2").string();
  auto table = run_dflow("replay " + ckpt + " --samples 3,17");
  INFO(table.output);
  CHECK(table.exit_code == 0);
  CHECK(table.output.find("sample 3") != std::string::npos);
  CHECK(table.output.find("sample 17") != std::string::npos);
  CHECK(table.output.find("together") != std::string::npos);

  auto json = run_dflow("replay " + dir.string() + " --samples 3,17 --json --log-level error");
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  auto report = nlohmann::json::parse(json.output.substr(json.output.find('{')));
  CHECK(report["global_step"] == 2);
  REQUIRE(report["rows"].size() == 3);
  for (const auto& row : report["rows"]) {
    CHECK(row["loss"].get<double>() > 0);
    CHECK(row["grad_norm"].get<double>() > 0);
    CHECK(std::isfinite(row["grad_norm"].get<double>()));
  }
  CHECK(report["rows"][2]["sample_ids"] == nlohmann::json::array({3, 17}));
  auto unknown = run_dflow("replay " + ckpt + " --samples 3,99999,123456");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("unknown sample id(s) 99999, 123456") != std::string::npos);
}

TEST_CASE("Cli.Eval.bad_input_is_refused_naming_key_node_or_file") {
  auto no_prompts = run_dflow("config --set eval.prompts=");
  INFO(no_prompts.output);
  CHECK(no_prompts.exit_code == 2);
  CHECK(no_prompts.output.find("node 'eval' (eval.tau) measures tau on held-out prompts, but neither its params.prompts nor eval.prompts is set") !=
        std::string::npos);
  auto cold = run_dflow("config --set eval.temperature=-0.5");
  CHECK(cold.exit_code == 2);
  CHECK(cold.output.find("eval.temperature: must be >= 0") != std::string::npos);
  auto negative = run_dflow("eval --target t --drafter d --prompts p --temperature -1");
  CHECK(negative.exit_code == 2);
  CHECK(negative.output.find("--temperature") != std::string::npos);

  auto dir = fresh_dir("eval-missing");
  const auto absent = (dir / "absent.jsonl").string();
  auto config = write_config(dir, {"eval.prompts=" + absent}, "");
  auto missing = run_dflow("train " + config.string());
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("node 'eval' (eval.tau): prompts (params, or eval.prompts): cannot read the held-out prompts file '" + absent +
                            "'") != std::string::npos);
}

TEST_CASE("Cli.Version.prints_the_cuda_device_count") {
  auto o = run_dflow("version");
  CHECK(o.exit_code == 0);
  INFO(o.output);
  CHECK(std::regex_search(o.output, std::regex("CUDA available: (yes|no) \\([0-9]+ devices\\)")));
}

TEST_CASE("Cli.Config.key_in_the_wrong_section_names_the_right_one") {
  auto o = run_dflow("config --set train.max_steps=3");
  CHECK(o.exit_code == 2);
  CHECK(o.output.find("unknown key 'train.max_steps', did you mean 'run.max_steps'?") != std::string::npos);
}

TEST_CASE("Cli.Eval.unreadable_prompts_file_says_why") {
  auto dir = fresh_dir("eval-prompts");
  auto eval = [&](const fs::path& prompts) {
    return run_dflow("eval --target " + (dir / "no-target").string() + " --drafter " + (dir / "no-drafter").string() +
                     " --prompts " + prompts.string());
  };
  auto missing = eval(dir / "nope.jsonl");
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find("cannot read prompts file " + (dir / "nope.jsonl").string() + ": no such file") !=
        std::string::npos);
  CHECK(eval(dir).output.find("it is a directory, not a JSONL file") != std::string::npos);
  std::ofstream(dir / "array.json") << "[\n  {\"prompt_ids\": [1, 2]}\n]\n";
  auto not_jsonl = eval(dir / "array.json");
  CHECK(not_jsonl.exit_code == 1);
  CHECK(not_jsonl.output.find((dir / "array.json").string() + ":1: not a JSON line (expected JSONL") != std::string::npos);
  std::ofstream(dir / "ids.jsonl") << "{\"prompt_ids\": [1, 2]}\n{\"prompt\": \"hello\"}\n";
  auto wrong_keys = eval(dir / "ids.jsonl");
  CHECK(wrong_keys.output.find((dir / "ids.jsonl").string() + ":2: key 'input_ids' not found") != std::string::npos);
}

TEST_CASE("Cli.MakeTinyTarget.bf16_shards_with_an_index_and_presets_named") {
  auto dir = fresh_dir("cli-shards");
  auto o = run_dflow("make-tiny-target --out " + (dir / "t").string() +
                     " --layers 2 --hidden-size 32 --heads 4 --kv-heads 2 --vocab 20000 --dtype bfloat16 --max-shard-mib 1");
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("bfloat16, sharded with model.safetensors.index.json") != std::string::npos);
  CHECK(fs::exists(dir / "t" / "model.safetensors.index.json"));
  // 1 MiB shards: the embedding (1.25 MiB) alone, the layers, the LM head alone.
  CHECK(fs::exists(dir / "t" / "model-00003-of-00003.safetensors"));
  // A preset fixes the shape: a shape option beside it is a usage error, as is an unknown preset.
  CHECK(run_dflow("make-tiny-target --out " + (dir / "u").string() + " --preset qwen3-8b --layers 2").exit_code == 2);
  auto unknown = run_dflow("make-tiny-target --out " + (dir / "u").string() + " --preset llama-70b");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("qwen3-0.6b") != std::string::npos);
}
