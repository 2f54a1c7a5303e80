// The end-of-run summary says where everything the run wrote is, so that the
// next command (tensorboard, dflow report, dflow eval) needs no searching.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

testing::Outcome train_two_steps(const fs::path& dir, const std::string& sinks) {
  const auto config = dir / "run.yaml";
  std::ofstream(config) << config::to_yaml(testing::small_run_config(dir, {"run.max_steps=2", "metrics.sinks=" + sinks}));
  return testing::run_command(::dflow::testing::dflow_binary() + " train " + config.string() + " --log-level info", 300);
}

}  // namespace

TEST_CASE("Cli.Train.summary_names_the_tensorboard_folder_when_the_sink_writes_one") {
  auto with = fresh_dir("summary-tensorboard");
  auto o = train_two_steps(with, "[jsonl, tensorboard]");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  // At start: what the LR schedule spans (run.max_steps sizes it).
  CHECK(o.output.find("schedule: cosine over 2 steps (warmup 1): run.max_steps ends the run before train.epochs 6 x ") !=
        std::string::npos);
  CHECK(o.output.find("metrics: " + (with / "metrics.jsonl").string()) != std::string::npos);
  CHECK(o.output.find("tensorboard: " + (with / "tensorboard").string() + " (tensorboard --logdir " + with.string() +
                      ")") != std::string::npos);

  auto without = fresh_dir("summary-no-tensorboard");
  auto plain = train_two_steps(without, "[jsonl]");
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.output.find("tensorboard:") == std::string::npos);
}
