// One checkpoint writer in a real run: the guard halts while the background
// checkpoint node is still writing the same step. Both used to write into one
// temporary directory and prune the same folder.
#include <doctest/doctest.h>

#include <fstream>

#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::records_of_kind;
namespace fs = std::filesystem;

namespace {
config::FaultDecl fault(const std::string& kind, int64_t step, const std::string& node = "", double seconds = 0.1) {
  config::FaultDecl f;
  f.kind = kind;
  f.step = step;
  f.node = node;
  f.seconds = seconds;
  return f;
}
}  // namespace

TEST_CASE("Drill.OneWriter.a_halt_during_a_background_checkpoint_write_leaves_an_intact_latest") {
  const auto dir = fresh_dir("one-writer-halt");
  // The checkpoint of step 4 stalls half-way (a slow disk); step 5's loss is
  // NaN, and the halt policy saves the state after step 4 at once.
  auto config = small_run_config(dir, {"guard.policy=halt", "checkpoint.every_steps=1",
                                       "checkpoint.on_write_error=continue", "run.max_steps=12"});
  config.faults.push_back(fault("delay", 3, "checkpoint", 1.0));
  config.faults.push_back(fault("nan_loss", 4));
  CHECK_THROWS_WITH(nodes::run_training(config, {}), doctest::Contains("guard policy 'halt'"));

  const auto latest = train::resolve_checkpoint(dir / "checkpoints", "latest");
  CHECK(latest.filename() == "step-4");
  const auto checkpoint = train::read_checkpoint(latest);  // every file matches its checksum
  CHECK(checkpoint.global_step == 4);
  for (const auto& [name, t] : checkpoint.drafter_tensors) CHECK(torch::isfinite(t).all().item<bool>());
  // Neither write failed: the background one finished before the halt's began.
  CHECK(records_of_kind(dir, "alarm").empty());
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints"))
    CHECK_MESSAGE(entry.path().filename().string().front() != '.', "left over: ", entry.path());
}
