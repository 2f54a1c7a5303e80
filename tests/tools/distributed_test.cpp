// Data parallel as a user runs it: 2 ranks over Gloo on loopback, launched by
// `dflow launch`, by torchrun, and by hand (to kill one). Each rank uses one
// graph thread and one torch thread; every wait has a hard limit.
#include "test_paths.hpp"
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <yaml-cpp/yaml.h>

#include "../nodes/drafter_params.hpp"
#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"
#include "train/checkpoint.hpp"
#include "train/launch_env.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

// 1-rank and 2-rank step losses agree to this relative tolerance: the same
// sums, added in another order (float32 gradients over 2 partial sums).
constexpr double kLossTolerance = 1e-4;
constexpr int kSteps = 6;

using testing::Outcome;

// Runs a shell command line (stdout and stderr together), killed after `limit_s`.
Outcome run(const std::string& command, int limit_s = 120) { return testing::run_command(command, limit_s); }

std::string dflow_bin() { return ::dflow::testing::dflow_binary(); }

// A small 1-thread run in `dir` (2 ranks share this machine's 2 cores).
config::Config run_config(const fs::path& dir, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"run.threads=1", "run.torch_threads=1", "train.epochs=1",
                                       "run.max_steps=" + std::to_string(kSteps), "distributed.timeout_s=20",
                                       "checkpoint.every_steps=3"});
  return testing::small_run_config(dir, overrides);
}

fs::path write_run_config(const fs::path& dir, const config::Config& config, const std::string& extra_yaml = "") {
  auto path = dir / "run.yaml";
  std::ofstream(path) << config::to_yaml(config) << extra_yaml;
  return path;
}

fs::path write_config(const fs::path& dir, std::vector<std::string> overrides, const std::string& extra_yaml = "") {
  return write_run_config(dir, run_config(dir, std::move(overrides)), extra_yaml);
}

// The same with the drafter node's objective set to D-PACE.
fs::path write_dpace_config(const fs::path& dir, std::vector<std::string> overrides) {
  auto config = run_config(dir, std::move(overrides));
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params["objective"] = "dpace";
  return write_run_config(dir, config);
}

// The same with the drafter kind DSpine, its transfer_rank left to
// the target, and the info log (the line saying what it chose).
fs::path write_dspine_config(const fs::path& dir, std::vector<std::string> overrides, const std::string& extra_yaml) {
  overrides.push_back("run.log_level=info");
  auto config = run_config(dir, std::move(overrides));
  config = testing::with_kind(config, "{kind: dspine, message_size: 16, top_k: 8, alignment_warmup_steps: 1}");
  return write_run_config(dir, config, extra_yaml);
}

// Every field of two step records except wall-clock and telemetry; losses,
// grad norms and accuracies within the tolerance, the rest exactly.
void check_same_steps(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b, double tolerance) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1);
    auto x = a[i], y = b[i];
    for (const char* key : {"loss", "grad_norm"}) {
      const double u = x[key].get<double>(), v = y[key].get<double>();
      CHECK(std::abs(u - v) <= tolerance * std::max(1.0, std::abs(u)));
      x.erase(key), y.erase(key);
    }
    CHECK(std::abs(x["loss_weight"].get<double>() - y["loss_weight"].get<double>()) <= 1e-9 * x["loss_weight"].get<double>());
    x.erase("loss_weight"), y.erase("loss_weight");
    auto ax = x["accuracy_per_position"], ay = y["accuracy_per_position"];
    REQUIRE(ax.size() == ay.size());
    for (size_t k = 0; k < ax.size(); ++k) CHECK(std::abs(ax[k].get<double>() - ay[k].get<double>()) <= 1e-9);
    x.erase("accuracy_per_position"), y.erase("accuracy_per_position");
    CHECK(x.dump() == y.dump());
  }
}

// The uninterrupted 2-rank run the tests compare with (made once).
const fs::path& two_rank_run() {
  static const fs::path dir = [] {
    auto d = fresh_dir("dist-2rank");
    auto o = run(dflow_bin() + " launch -n 2 " + write_config(d, {"train.grad_accum=1"}).string());
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return d;
  }();
  return dir;
}

}  // namespace

TEST_CASE("Dist.Launch.two_ranks_give_the_one_rank_losses_of_the_same_global_batch") {
  // One rank with grad_accum 2 and two ranks with grad_accum 1 both take 2
  // batches per step, the same batches in the same steps.
  auto one = fresh_dir("dist-1rank");
  auto o = run(dflow_bin() + " train " + write_config(one, {"train.grad_accum=2"}).string());
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  auto single = testing::step_records(one), pair = testing::step_records(two_rank_run());
  REQUIRE(single.size() == static_cast<size_t>(kSteps));
  check_same_steps(single, pair, kLossTolerance);
  // Only rank 0 writes records and checkpoints; each record names the slowest rank.
  std::ifstream in(two_rank_run() / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  auto first = nlohmann::json::parse(line);
  CHECK(first["time"]["rank_step_s"].size() == 2);
  CHECK(first["time"]["slowest_rank"].get<int>() >= 0);
  CHECK(train::read_checkpoint(train::resolve_checkpoint(two_rank_run() / "checkpoints", "latest")).global_step == kSteps);
}

TEST_CASE("Dist.Launch.dpace_two_ranks_give_the_one_rank_losses_of_the_same_global_batch") {
  // D-PACE weighs each block by its own confidences; the step divides by the
  // weight sum over both ranks, whose shares hold different numbers of
  // blocks: the split must not change a loss.
  auto one = fresh_dir("dist-dpace-1rank"), two = fresh_dir("dist-dpace-2rank");
  auto o = run(dflow_bin() + " train " + write_dpace_config(one, {"train.grad_accum=2"}).string());
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  o = run(dflow_bin() + " launch -n 2 " + write_dpace_config(two, {"train.grad_accum=1"}).string());
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const auto single = testing::step_records(one), pair = testing::step_records(two);
  REQUIRE(single.size() == static_cast<size_t>(kSteps));
  check_same_steps(single, pair, kLossTolerance);
  // Not the decay's losses: the objective really changed.
  CHECK(single[0]["loss"] != testing::step_records(two_rank_run())[0]["loss"]);
}

TEST_CASE("Dist.Launch.a_short_last_step_leaves_one_rank_an_empty_share") {
  // A whole epoch: when its batch count is odd, rank 1 has nothing in the
  // last step and must still take part in it (or rank 0 would hang).
  auto one = fresh_dir("dist-epoch-1"), two = fresh_dir("dist-epoch-2");
  auto o1 = run(dflow_bin() + " train " + write_config(one, {"train.grad_accum=2", "run.max_steps=0", "data.tokens_per_batch=2048"}).string());
  auto o2 = run(dflow_bin() + " launch -n 2 " + write_config(two, {"train.grad_accum=1", "run.max_steps=0", "data.tokens_per_batch=2048"}).string());
  INFO(o1.output, o2.output);
  REQUIRE(o1.exit_code == 0);
  REQUIRE(o2.exit_code == 0);
  auto single = testing::step_records(one), pair = testing::step_records(two);
  check_same_steps(single, pair, kLossTolerance);
  REQUIRE_FALSE(pair.empty());
  CHECK(pair.back()["micro_batches"].get<int>() == 1);  // 15 batches of 16 rows: the last step has one
}

TEST_CASE("Dist.Launch.every_rank_trains_with_rank_0s_fixed_tensors") {
  // DSpine's token codes come from an eigendecomposition on each rank, never
  // trained; a rank whose start differs (rank 1's drafter multiplied by 3:
  // another build's eigenvectors) must train with rank 0's, as the
  // checkpoints it resumes from would give them: the records are those of
  // the run without the fault, to the bit.
  auto clean = fresh_dir("dist-dspine"), skewed = fresh_dir("dist-dspine-skewed");
  const std::vector<std::string> overrides{"train.grad_accum=1", "run.max_steps=4"};
  auto o1 = run(dflow_bin() + " launch -n 2 " + write_dspine_config(clean, overrides, "").string());
  auto o2 = run(dflow_bin() + " launch -n 2 " +
                write_dspine_config(skewed, overrides, "faults: [{kind: corrupt_init, rank: 1, factor: 3}]\n").string());
  INFO(o1.output, o2.output);
  REQUIRE(o1.exit_code == 0);
  REQUIRE(o2.exit_code == 0);
  CHECK(o2.output.find("injected fault corrupt_init") != std::string::npos);
  const auto a = testing::step_records(clean), b = testing::step_records(skewed);
  REQUIRE(a.size() == 4);
  check_same_steps(a, b, 0.0);
  // Each rank says what it chose for the rank left to the target, and why.
  CHECK(o1.output.find("drafter kind dspine: transfer_rank ") != std::string::npos);
  CHECK(o1.output.find("(left to the target): the target's LM head has ") != std::string::npos);
}

TEST_CASE("Dist.Torchrun.launches_two_ranks_that_complete") {
  const std::string torchrun = ::dflow::testing::torchrun();
  if (torchrun.empty() || !fs::exists(torchrun)) {
    MESSAGE("skipped: no torchrun beside the configured torch (tools/setup.sh installs it in the venv)");
    return;
  }
  auto dir = fresh_dir("dist-torchrun");
  auto o = run(torchrun + " --standalone --nproc-per-node 2 --no-python " + dflow_bin() + " train " +
               write_config(dir, {"train.grad_accum=1"}).string());
  INFO(o.output);
  CHECK(o.exit_code == 0);
  // The same run as `dflow launch -n 2` makes.
  check_same_steps(testing::step_records(two_rank_run()), testing::step_records(dir), 0.0);
}

TEST_CASE("Dist.Failure.a_killed_rank_makes_the_other_exit_naming_it") {
  auto dir = fresh_dir("dist-kill");
  // Slow steps so that the run is surely in progress when rank 1 dies.
  auto config = write_config(dir, {"train.grad_accum=1", "run.max_steps=0", "distributed.timeout_s=10"},
                             "faults: [{kind: delay, node: drafter, step: 2, seconds: 0.5}]\n");
  const int port = train::free_loopback_port();
  auto start = [&](int rank) {
    // A background subshell records dflow's pid, then its exit code.
    const std::string r = std::to_string(rank);
    std::string command = "(export RANK=" + r + " LOCAL_RANK=" + r + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(port) + "; " + dflow_bin() + " train " + config.string() + " > " +
                          (dir / ("log" + r)).string() + " 2>&1 & echo $! > " + (dir / ("pid" + r)).string() +
                          "; wait $!; echo $? > " + (dir / ("exit" + r)).string() + ") &";
    REQUIRE(std::system(command.c_str()) == 0);
    int pid = 0;
    for (int i = 0; i < testing::scaled(100) && pid == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::ifstream(dir / ("pid" + r)) >> pid;
    }
    REQUIRE(pid > 0);
    return pid;
  };
  const int rank0 = start(0), rank1 = start(1);
  // Wait (at most 60 s) until 4 steps are recorded (step-3 saved), then kill rank 1.
  size_t records = 0;
  for (int i = 0; i < testing::scaled(600) && records < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    records = testing::step_records(dir).size();
  }
  ::kill(rank1, SIGKILL);
  REQUIRE(records >= 4);
  // Rank 0 must exit non-zero on its own, within the timeout (10 s) plus margin.
  int exit_code = -1;
  for (int i = 0; i < testing::scaled(300) && exit_code < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream(dir / "exit0") >> exit_code;
  }
  if (exit_code < 0) ::kill(rank0, SIGKILL);  // never leave it behind
  std::ifstream in(dir / "log0");
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(log);
  REQUIRE(exit_code >= 0);
  CHECK(exit_code == 1);
  CHECK(log.find("lost rank 1") != std::string::npos);
  // The last agreed checkpoint is intact.
  CHECK_NOTHROW(train::read_checkpoint(train::resolve_checkpoint(dir / "checkpoints", "latest")));
}

TEST_CASE("Dist.Resume.two_ranks_stopped_and_resumed_continue_with_identical_records") {
  auto dir = fresh_dir("dist-resume");
  auto first = run(dflow_bin() + " launch -n 2 " +
                   write_config(dir, {"train.grad_accum=1"}, "faults: [{kind: stop, step: 3}]\n").string());
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto config = write_config(dir, {"train.grad_accum=1"});
  auto second = run(dflow_bin() + " launch -n 2 " + config.string() + " --resume latest");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  check_same_steps(testing::step_records(two_rank_run()), testing::step_records(dir), 0.0);
  // One rank cannot continue a 2-rank run: it says what differs.
  auto single = run(dflow_bin() + " train " + config.string() + " --resume latest");
  CHECK(single.exit_code == 2);  // a resume that does not fit the run is a usage error
  CHECK(single.output.find("world_size 2, this run has world_size 1") != std::string::npos);
}

TEST_CASE("Dist.Env.bad_launcher_environment_names_the_variable") {
  auto dir = fresh_dir("dist-env");
  auto config = write_config(dir, {}).string();
  auto no_addr = run("env WORLD_SIZE=2 RANK=0 " + dflow_bin() + " train " + config);
  CHECK(no_addr.exit_code == 2);
  CHECK(no_addr.output.find("MASTER_ADDR is not set") != std::string::npos);
  auto bad_rank = run("env WORLD_SIZE=2 RANK=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + dflow_bin() + " train " + config);
  CHECK(bad_rank.exit_code == 2);
  CHECK(bad_rank.output.find("RANK=2 is not below WORLD_SIZE=2") != std::string::npos);
  auto bad_backend = run(dflow_bin() + " config " + config + " --set distributed.backend=mpi");
  CHECK(bad_backend.exit_code == 2);
  CHECK(bad_backend.output.find("distributed.backend") != std::string::npos);
}
