// The metrics sinks as a user reads them: after a crash and resume
// metrics.jsonl holds each step once.
#include <doctest/doctest.h>

#include <map>

#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const fs::path& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void write_lines(const fs::path& path, const std::vector<std::string>& lines, const std::string& tail = "") {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& line : lines) out << line << "\n";
  out << tail;
}

int64_t step_of(const std::string& line) { return nlohmann::json::parse(line).value("global_step", int64_t{-1}); }
std::string kind_of(const std::string& line) { return nlohmann::json::parse(line).value("kind", ""); }

}  // namespace

TEST_CASE("Train.Resume.metrics_jsonl_holds_each_step_once_after_a_crash") {
  auto dir = fresh_dir("metrics-resume");
  const std::vector<std::string> overrides{"run.max_steps=8", "checkpoint.every_steps=3", "eval.every_steps=2",
                                           "eval.max_new_tokens=4"};
  nodes::run_training(small_run_config(dir, overrides), {});
  const auto metrics = dir / "metrics.jsonl";

  // What a run killed after step 8 whose last checkpoint is step-3 leaves:
  // records of steps 4..8 past the checkpoint, a lagging evaluation of step 2
  // written after them, an alarm of step 7, and half a record at the end. The
  // record of step 3 itself is missing (killed between checkpoint and record).
  std::vector<std::string> crashed, lagging;
  for (const auto& line : lines_of(metrics)) {
    if (kind_of(line) == "step" && step_of(line) == 3) continue;
    if (kind_of(line) == "eval" && step_of(line) == 2) lagging.push_back(line);
    else crashed.push_back(line);
  }
  REQUIRE(lagging.size() == 1);
  crashed.push_back(lagging.front());
  crashed.push_back(R"({"kind":"alarm","alarm":"edge_draining","global_step":7,"message":"of the crashed run"})");
  write_lines(metrics, crashed, R"({"kind":"step","global_st)");

  nodes::RunOptions resume;
  resume.resume = (dir / "checkpoints" / "step-3").string();
  nodes::run_training(small_run_config(dir, overrides), resume);

  std::map<std::pair<std::string, int64_t>, int> count;
  for (const auto& line : lines_of(metrics)) {
    REQUIRE(nlohmann::json::accept(line));
    ++count[{kind_of(line), step_of(line)}];
  }
  for (int64_t step = 1; step <= 8; ++step) {
    CAPTURE(step);
    CHECK(count[{"step", step}] == 1);
  }
  for (int64_t step : {0, 2, 4, 6, 8}) {
    CAPTURE(step);
    CHECK(count[{"eval", step}] == 1);
  }
  CHECK(count[{"alarm", 7}] == 0);  // the crashed run's, past the checkpoint
  for (const auto& entry : fs::directory_iterator(dir)) CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
}
