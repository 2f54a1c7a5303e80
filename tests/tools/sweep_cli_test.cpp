// `dflow sweep` as a user runs it: a grid over a node swap times seeds, each
// variant its own run, compared with seeds grouped; a rerun skips what
// finished; Ctrl-C stops it and the same command resumes it.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "../nodes/train_fixture.hpp"
#include "report/config_diff.hpp"
#include "run_command.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 600);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The base config of a sweep: the small demo run, `steps` steps, tau every 2;
// `delay_s` > 0 slows each drafter step by that much (a delay fault).
fs::path base_config(const fs::path& dir, int steps, std::vector<std::string> extra = {}, double delay_s = 0) {
  extra.insert(extra.begin(), {"run.max_steps=" + std::to_string(steps), "eval.every_steps=2"});
  auto config = testing::small_run_config(dir / "unused", extra);
  if (delay_s > 0) {
    config::FaultDecl delay;
    delay.kind = "delay", delay.node = "drafter", delay.seconds = delay_s;
    config.faults.push_back(delay);
  }
  const fs::path file = dir / "base.yaml";
  std::ofstream(file) << config::to_yaml(config);
  return file;
}

std::string flat_value(const fs::path& run_dir, const std::string& key) {
  auto config = report::read_run_config(run_dir);
  REQUIRE_MESSAGE(config, "no config in " << run_dir);
  auto it = config->values.find(key);
  return it == config->values.end() ? "" : it->second;
}

}  // namespace

TEST_CASE("Cli.Sweep.a_node_swap_times_seeds_runs_each_variant_and_compares_them") {
  const fs::path dir = fresh_dir("sweep-grid");
  const fs::path base = base_config(dir, 4), out = dir / "sweep";
  const std::string command = "sweep " + base.string() + " --out " + out.string() +
                              " --vary pipeline.nodes.optimizer.type=optimizer_step.adamw,optimizer_step.muon --seeds 2 --parallel 2";
  auto o = run_dflow(command);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const std::vector<std::string> names{"optimizer=optimizer_step.adamw+seed=1234", "optimizer=optimizer_step.adamw+seed=1235",
                                       "optimizer=optimizer_step.muon+seed=1234", "optimizer=optimizer_step.muon+seed=1235"};
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK(testing::records_of_kind(out / name, "step").size() == 4);
    CHECK(fs::exists(out / "logs" / (name + ".log")));
    CHECK(o.output.find("[sweep] start " + name) != std::string::npos);
  }
  // Each run is the variant it is named after.
  CHECK(flat_value(out / names[2], "pipeline.nodes.optimizer.type") == "optimizer_step.muon");
  CHECK(flat_value(out / names[1], "pipeline.nodes.optimizer.type") == "optimizer_step.adamw");
  CHECK(flat_value(out / names[1], "run.seed") == "1235");
  // 2 at a time: the machine's threads divided between them.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  CHECK(flat_value(out / names[1], "run.threads") == std::to_string(std::max(1u, cores / 2)));
  // The comparison: two variants, seeds grouped, ranked by their means.
  CHECK(o.output.find("variants (runs that differ only in seed, grouped: mean ± sd)") != std::string::npos);
  CHECK(o.output.find("optimizer=optimizer_step.muon (mean of 2 seeds)") != std::string::npos);
  CHECK(o.output.find("1234 1235") != std::string::npos);
  CHECK(read_text(out / "compare.txt").find("winners") != std::string::npos);
  CHECK(read_text(out / "compare.html").find("id=\"variants\"") != std::string::npos);
  const auto state = nlohmann::json::parse(read_text(out / "sweep.json"));
  for (const auto& name : names) CHECK(state["variants"][name]["status"] == "done");

  // The same command again: nothing to run, nothing rewritten.
  const auto before = fs::last_write_time(out / names[0] / "metrics.jsonl");
  auto again = run_dflow(command);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("(0 to run, 2 at a time)") != std::string::npos);
  CHECK(again.output.find(names[3] + ": finished earlier, skipped") != std::string::npos);
  CHECK(fs::last_write_time(out / names[0] / "metrics.jsonl") == before);
  auto compared = run_dflow("sweep --out " + out.string() + " --compare-only");
  CHECK(compared.exit_code == 0);
  CHECK(compared.output.find("variants (runs that differ only in seed") != std::string::npos);
  auto nothing = run_dflow("sweep --out " + (dir / "none").string() + " --compare-only");
  CHECK(nothing.exit_code == 2);
  CHECK(nothing.output.find("holds no sweep (no sweep.json)") != std::string::npos);

  // Another sweep into the same directory is refused, saying what changed.
  const std::string three = command.substr(0, command.find(" --seeds")) + " --seeds 3";
  auto other = run_dflow(three);
  CHECK(other.exit_code == 2);
  CHECK(other.output.find("holds another sweep (seeds was 2, now 3)") != std::string::npos);

  // So is the same command on an edited config: the finished variants ran the old one.
  base_config(dir, 6);
  auto edited = run_dflow(command);
  CHECK(edited.exit_code == 2);
  CHECK_MESSAGE(edited.output.find("holds another sweep (the config " + base.string() +
                                   " is not the one its variants ran: its contents changed") != std::string::npos,
                edited.output);
  CHECK(fs::last_write_time(out / names[0] / "metrics.jsonl") == before);
}

TEST_CASE("Cli.Sweep.threads_a_variant_or_set_chose_hold_with_parallel_runs") {
  const fs::path dir = fresh_dir("sweep-threads");
  const fs::path base = base_config(dir, 1, {"eval.every_steps=0"}), out = dir / "sweep";
  auto o = run_dflow("sweep " + base.string() + " --out " + out.string() +
                     " --vary run.threads=1,3 --set run.torch_threads=2 --parallel 2");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  CHECK(flat_value(out / "threads=1", "run.threads") == "1");
  CHECK(flat_value(out / "threads=3", "run.threads") == "3");
  CHECK(flat_value(out / "threads=1", "run.torch_threads") == "2");
  CHECK(flat_value(out / "threads=3", "run.torch_threads") == "2");
}

TEST_CASE("Cli.Sweep.bad_grid_values_are_refused_before_anything_runs") {
  const fs::path dir = fresh_dir("sweep-bad");
  const fs::path base = base_config(dir, 2), out = dir / "sweep";
  auto bad = run_dflow("sweep " + base.string() + " --out " + out.string() + " --vary train.lr=0.01,abc");
  CHECK(bad.exit_code == 2);
  CHECK_MESSAGE(bad.output.find("sweep variant lr=abc: --set train.lr=abc: train.lr: expected a number") != std::string::npos,
                bad.output);
  auto node = run_dflow("sweep " + base.string() + " --out " + out.string() +
                        " --vary pipeline.nodes.optimizer.type=optimizer_step.adamw,optimizer_step.sgd");
  CHECK(node.exit_code == 2);
  CHECK_MESSAGE(node.output.find("unknown node type 'optimizer_step.sgd'") != std::string::npos, node.output);
  auto param = run_dflow("sweep " + base.string() + " --out " + out.string() + " --vary pipeline.nodes.drafter.params.objective=dpace,dpce");
  CHECK(param.exit_code == 2);
  CHECK_MESSAGE(param.output.find("sweep variant drafter.objective=dpce") != std::string::npos, param.output);
  CHECK_FALSE(fs::exists(out / "drafter.objective=dpace"));  // nothing ran
  // A variant named like a directory or file the sweep keeps in --out, or not a plain directory name.
  auto logs = run_dflow("sweep " + base.string() + " --out " + out.string() + " --variant 'logs: train.lr=0.1' --variant base");
  CHECK(logs.exit_code == 2);
  CHECK_MESSAGE(logs.output.find("--variant logs: the sweep writes its own logs in --out") != std::string::npos, logs.output);
  auto up = run_dflow("sweep " + base.string() + " --out " + out.string() + " --variant '..: train.lr=0.1' --variant base");
  CHECK(up.exit_code == 2);
  CHECK_MESSAGE(up.output.find("--variant ..: train.lr=0.1: expected NAME") != std::string::npos, up.output);
  auto seed = run_dflow("sweep " + base.string() + " --out " + out.string() + " --variant 'mine: run.seed=9' --variant base");
  CHECK(seed.exit_code == 2);
  CHECK_MESSAGE(seed.output.find("--variant mine: run.seed is the sweep's") != std::string::npos, seed.output);
  // The sweep's own --set may not place the runs either (each run's directory is --out/NAME).
  auto placed = run_dflow("sweep " + base.string() + " --out " + out.string() + " --set run.out_dir=elsewhere");
  CHECK(placed.exit_code == 2);
  CHECK_MESSAGE(placed.output.find("--set run.out_dir=elsewhere: run.out_dir is the sweep's") != std::string::npos,
                placed.output);
  CHECK_FALSE(fs::exists(out / "base"));
}

TEST_CASE("Cli.Sweep.ctrl_c_stops_it_and_the_same_command_resumes_it") {
  const fs::path dir = fresh_dir("sweep-stop");
  // Slow steps (a delay fault) with a checkpoint after each, so that the stop
  // comes after a checkpoint and before the end.
  const fs::path base = base_config(dir, 8, {"checkpoint.every_steps=1", "eval.every_steps=0"}, 0.5), out = dir / "sweep";
  const std::string args = "sweep " + base.string() + " --out " + out.string();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);  // a process group of its own, as a shell starts a command in a terminal
    const std::string line = ::dflow::testing::dflow_binary() + " " + args + " > " + (dir / "first.log").string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + line).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const fs::path latest = out / "base" / "checkpoints" / "latest";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(testing::scaled(300));
  while (!fs::exists(latest) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_MESSAGE(fs::exists(latest), "the variant never wrote its first checkpoint: " << read_text(dir / "first.log"));
  // The variant's run is in a process group of its own, so the terminal's
  // Ctrl-C reaches the sweep alone, which stops the run itself and records
  // it interrupted (a run that got the signal too could end before the
  // sweep had read it, and be recorded failed).
  std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t run_pid = 0;
  children >> run_pid;
  REQUIRE(run_pid > 0);
  CHECK(::getpgid(run_pid) == run_pid);
  CHECK(::getpgid(run_pid) != ::getpgid(pid));
  ::kill(-pid, SIGINT);  // Ctrl-C: the whole foreground process group
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string first = read_text(dir / "first.log");
  INFO(first);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(first.find("[sweep] stopped; run the same command again to resume") != std::string::npos);
  CHECK(nlohmann::json::parse(read_text(out / "sweep.json"))["variants"]["base"]["status"] == "interrupted");
  const size_t steps_before = testing::records_of_kind(out / "base", "step").size();
  CHECK(steps_before < 8);

  auto resumed = run_dflow(args);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.output.find("[sweep] start base (resumes from its latest checkpoint)") != std::string::npos);
  const auto steps = testing::records_of_kind(out / "base", "step");
  REQUIRE(steps.size() == 8);  // each step once: the resume cut the records back to its checkpoint
  for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i]["global_step"] == static_cast<int>(i + 1));
}
