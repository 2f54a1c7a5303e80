// The metrics sinks as a user reads them: after a crash and resume
// metrics.jsonl holds each step once; a sink that cannot write is said so.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
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

// A metrics sink that cannot write (a full disk) never stops training and
// never loses records silently: an alarm, and the summary says what is missing.
namespace {

// A tmpfs of `bytes` on `at` (root only; the test says so and skips otherwise).
struct SmallDisk {
  fs::path where;
  bool mounted = false;
  std::string why_not;
  SmallDisk(const fs::path& at, uint64_t bytes) : where(at) {
    fs::create_directories(where);
    if (::geteuid() != 0) {
      why_not = "not root (mounting a tmpfs needs CAP_SYS_ADMIN)";
      return;
    }
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    mounted = ::mount("dflow-test", where.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted) why_not = std::string("mount -t tmpfs failed: ") + std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted && ::umount2(where.c_str(), 0) != 0) ::umount2(where.c_str(), MNT_DETACH);
  }
};

bool has_alarm(const nodes::TrainResult& result, const std::string& sink) {
  for (const auto& alarm : result.alarms)
    if (alarm.value("alarm", "") == "metrics_not_written" && alarm.value("sink", "") == sink) return true;
  return false;
}

// TensorBoard's framing walked to the end: true when the file ends on a whole record.
bool whole_event_records(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at + 12 <= bytes.size()) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    at += 12 + length + 4;
  }
  return at == bytes.size();
}

}  // namespace

TEST_CASE("Train.Sinks.metrics_jsonl_on_a_full_disk_goes_on_with_an_alarm") {
  auto dir = fresh_dir("sink-jsonl-full");
  fs::create_symlink("/dev/full", dir / "metrics.jsonl");  // every write: No space left on device
  const auto result = nodes::run_training(
      small_run_config(dir, {"run.max_steps=4", "metrics.sinks=[jsonl, tensorboard]"}), {});
  CHECK(result.completed_steps == 4);
  CHECK(has_alarm(result, "jsonl"));
  const std::string summary = nodes::summarize(result);
  INFO(summary);
  CHECK(summary.find("metrics.jsonl") != std::string::npos);
  CHECK(summary.find("records not written") != std::string::npos);
  CHECK(summary.find("steps 0..4") != std::string::npos);  // the untrained baseline's evaluation is step 0
  CHECK(summary.find("No space left on device") != std::string::npos);
}

TEST_CASE("Train.Sinks.tensorboard_on_a_full_disk_goes_on_with_an_alarm") {
  auto dir = fresh_dir("sink-tensorboard-full");
  SmallDisk disk(dir / "tensorboard", 4096);  // the event file's first records fit, the rest do not
  if (!disk.mounted) {
    MESSAGE("skipped: needs a small tmpfs on the tensorboard directory: " << disk.why_not);
    return;
  }
  const auto result = nodes::run_training(
      small_run_config(dir, {"run.max_steps=6", "metrics.sinks=[jsonl, tensorboard]"}), {});
  CHECK(result.completed_steps == 6);
  CHECK(has_alarm(result, "tensorboard"));
  const std::string summary = nodes::summarize(result);
  INFO(summary);
  CHECK(summary.find("records not written") != std::string::npos);
  CHECK(summary.find("No space left on device") != std::string::npos);
  // The alarm is in metrics.jsonl, which still holds every step.
  int steps = 0, alarms = 0;
  for (const auto& line : lines_of(dir / "metrics.jsonl")) {
    steps += kind_of(line) == "step";
    alarms += nlohmann::json::parse(line).value("sink", "") == "tensorboard";
  }
  CHECK(steps == 6);
  CHECK(alarms >= 1);  // one per outage: small records may still fit between failures
  // What was written stays readable: no half record at the end.
  for (const auto& e : fs::directory_iterator(dir / "tensorboard")) CHECK(whole_event_records(e.path()));
}
