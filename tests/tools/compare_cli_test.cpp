// `dflow compare` on real runs, as a user runs it: a finished run and a
// stopped-and-resumed one that differ in train.lr, side by side.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <regex>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

// Trains 6 steps (checkpoints and evaluations every 3); `stop_at` > 0 stops
// the run there first, as an interruption would, then resumes it.
fs::path small_run(const std::string& name, const std::string& lr, int stop_at = 0) {
  const fs::path dir = fresh_dir(name);
  auto config = testing::small_run_config(dir, {"run.max_steps=6", "checkpoint.every_steps=3", "eval.every_steps=3", "train.lr=" + lr});
  std::ofstream(dir / "run.yaml") << config::to_yaml(config);
  std::ofstream(dir / "stopped.yaml") << config::to_yaml(testing::stopped_after(config, stop_at));
  if (stop_at > 0) {
    auto stopped = run_dflow("train " + (dir / "stopped.yaml").string());
    INFO(stopped.output);
    REQUIRE(stopped.exit_code == 0);
  }
  auto o = run_dflow("train " + (dir / "run.yaml").string() + (stop_at > 0 ? " --resume latest" : ""));
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  return dir;
}

}  // namespace

TEST_CASE("Cli.Compare.a_finished_and_a_resumed_run_side_by_side") {
  const fs::path finished = small_run("compare-finished", "0.02"), resumed = small_run("compare-resumed", "0.05", 3);
  const fs::path page = finished / "compare.html";
  auto o = run_dflow("compare " + finished.string() + " " + resumed.string() + " -o " + page.string());
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  for (const auto& dir : {finished, resumed}) CHECK(o.output.find(dir.filename().string()) != std::string::npos);
  CHECK(std::regex_search(o.output, std::regex("\nsteps +6 / [0-9]+ +6 / [0-9]+\n")));  // the resumed run's steps once
  CHECK(o.output.find("config: 1 key differs") != std::string::npos);  // train.lr; run.out_dir is left out
  CHECK(o.output.find("train.lr") != std::string::npos);
  CHECK(o.output.find("highest best tau: ") != std::string::npos);
  CHECK(o.output.find("lowest final loss (mean of last 10 steps): ") != std::string::npos);
  CHECK(o.output.find("where each graph waited") != std::string::npos);
  CHECK(o.output.find("different steps") == std::string::npos);

  std::ifstream in(page);
  const std::string html{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  for (const auto& dir : {finished, resumed}) CHECK(html.find(dir.filename().string()) != std::string::npos);
  for (const char* title : {"Loss over steps", "Loss over wall time", "Tau over steps", "Tau over wall time"}) CHECK(html.find(title) != std::string::npos);
  CHECK(html.find("<code>train.lr</code>") != std::string::npos);

  const fs::path not_a_run = fresh_dir("compare-not-a-run");
  auto refused = run_dflow("compare " + finished.string() + " " + not_a_run.string() + " -o " + page.string());
  CHECK(refused.exit_code == 2);
  CHECK(refused.output.find(not_a_run.string() + ": not a dflow run directory (no metrics.jsonl)") != std::string::npos);
}
