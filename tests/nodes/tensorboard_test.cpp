// The tensorboard sink in a real run: what TensorBoard's own reader shows
// equals metrics.jsonl, and a resumed run adds its steps without repeating any.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include "nodes/trainer.hpp"
#include "tools/run_command.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
namespace fs = std::filesystem;

TEST_CASE("Train.TensorBoard.run_and_resume_read_back_equal_to_metrics_jsonl") {
  if (::dflow::testing::python().empty()) FAIL("no Python beside torchrun: run tools/setup.sh");
  auto dir = fresh_dir("tensorboard");
  const std::vector<std::string> overrides{"metrics.sinks=[jsonl, tensorboard]", "eval.every_steps=3",
                                           "checkpoint.every_steps=3"};
  // A 12-step run stopped after step 6 (run.max_steps sizes the LR
  // schedule, so it stays 12 and a stop fault ends the first invocation).
  auto twelve_steps = overrides;
  twelve_steps.push_back("run.max_steps=12");
  nodes::run_training(testing::stopped_after(small_run_config(dir, twelve_steps), 6), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(small_run_config(dir, twelve_steps), resume);

  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "tensorboard"))
    files += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  CHECK(files == 2);  // one per invocation
  const auto o = testing::run_command(
      ::dflow::testing::python() + " " + ::dflow::testing::source_dir() + "/tests/report/tensorboard_check.py " + dir.string() +
          " --restart-steps 7 --require 'train/loss,train/grad_norm,train/lr,train/accuracy@1,time/tokens_per_s,"
          "train/padding_efficiency,eval/mean_tau,node_busy_share/drafter,edge_occupancy/'",
      120);
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("steps 0..12") != std::string::npos);  // the untrained baseline's tau is step 0
}
