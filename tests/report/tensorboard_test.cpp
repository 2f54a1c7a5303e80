// The tensorboard sink as TensorBoard reads it: record framing and CRC32C,
// and every value equal to metrics.jsonl's when the files are read back by
// the tensorboard package's own event reader (tensorboard_check.py), also
// across a resume after a crash.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include "fixture.hpp"
#include "report/event_file.hpp"
#include "report/tensorboard_sink.hpp"
#include "tools/run_command.hpp"

using namespace dflow::report;
namespace fs = std::filesystem;

namespace {

// Runs the reader script on a run directory; its one-line verdict is the output.
::dflow::testing::Outcome check_with_tensorboard(const fs::path& run_dir, const std::string& extra = "") {
  if (::dflow::testing::python().empty()) FAIL("no Python beside torchrun: run tools/setup.sh");
  return ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                         "/tests/report/tensorboard_check.py " + run_dir.string() + " " + extra,
                                     120);
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Fixture step records plus what the other writers add: a guard event as
// metric_sample writes it, and eval records.
std::vector<nlohmann::json> run_records(int steps) {
  auto records = test::fixture_records({.steps = steps, .total_steps = 200, .draining_edge = "load.out->pad.in",
                                        .drain_slope = -0.1, .guard_skip_step = 30});
  std::vector<nlohmann::json> out;
  for (auto& r : records) {
    const int64_t step = r.value("global_step", int64_t{0});
    // A loss that reads the target's distribution: the tau its acceptance rates imply.
    if (r["kind"] == "step") r["expected_tau"] = 1.0 + 0.01 * static_cast<double>(step);
    out.push_back(r);
    if (r["kind"] == "step" && r["guard"]["action"] != "applied")
      out.push_back({{"kind", "guard"}, {"event", "non_finite"}, {"global_step", step}, {"action", r["guard"]["action"]},
                     {"policy", "skip"}, {"metric", "loss"}, {"value", "nan"}, {"threshold", 4.5},
                     {"reason", "non-finite loss"}, {"sample_ids", {17, 4242}}});
    if (r["kind"] == "step" && step % 20 == 0)
      out.push_back({{"kind", "eval"}, {"global_step", step}, {"mean_tau", 1.0 + step / 10.0}, {"best_tau", 1.0 + step / 10.0},
                     {"acceptance_by_position", {0.9, 0.5, 0.25}}, {"time", {{"speculative_tokens_per_s", 123.5}}}});
  }
  return out;
}

void write_jsonl(const fs::path& path, const std::vector<nlohmann::json>& records, std::ios::openmode mode) {
  std::ofstream out(path, mode);
  for (const auto& r : records) out << r.dump() << "\n";
}

}  // namespace

TEST_CASE("Report.TensorBoard.RecordFramingIsTensorFlows") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the CRC-32C check value
  CHECK(crc32c("") == 0u);
  const uint32_t crc = crc32c("abc");
  CHECK(masked_crc32c("abc") == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string record = frame_record("hello");
  REQUIRE(record.size() == 8 + 4 + 5 + 4);
  CHECK(record.substr(0, 8) == std::string("\x05\0\0\0\0\0\0\0", 8));  // little-endian length
  CHECK(record.substr(12, 5) == "hello");
}

TEST_CASE("Report.TensorBoard.ValuesEqualMetricsJsonlInTensorBoardsReader") {
  const fs::path dir = test::fresh_dir("tensorboard-run");
  const auto records = run_records(80);
  write_jsonl(dir / "metrics.jsonl", records, std::ios::trunc);
  {
    TensorBoardSink sink({.dir = dir / "tensorboard"});
    for (const auto& r : records) sink.write(r);
  }
  REQUIRE(event_files(dir / "tensorboard").size() == 1);
  const auto o = check_with_tensorboard(
      dir, "--require 'train/loss,train/grad_norm,train/lr,train/accuracy@1,train/accuracy@15,time/tokens_per_s,"
           "train/padding_efficiency,eval/mean_tau,tau/measured,tau/expected,node_busy_share/target,"
           "edge_occupancy/load.out->pad.in,guard,alarm'");
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("tensorboard agrees with metrics.jsonl") != std::string::npos);
  CHECK(o.output.find("steps 1..80") != std::string::npos);
}

TEST_CASE("Report.TensorBoard.ResumeAfterACrashWritesEachStepOnce") {
  const fs::path dir = test::fresh_dir("tensorboard-resume");
  auto first = run_records(80), second = run_records(120);
  // The crashed run recorded steps 1..80; its last checkpoint was step 60.
  write_jsonl(dir / "metrics.jsonl", first, std::ios::trunc);
  {
    TensorBoardSink sink({.dir = dir / "tensorboard"});
    for (const auto& r : first) sink.write(r);
  }
  // The resumed run trains 61..120 again, with other values (another graph,
  // other timings), and is handed a few records from before its checkpoint.
  std::vector<nlohmann::json> resumed;
  for (auto r : second) {
    const int64_t step = r.value("global_step", int64_t{0});
    if (step < 55) continue;
    if (r["kind"] == "step") r["loss"] = r["loss"].is_number() ? nlohmann::json(r["loss"].get<double>() * 2) : r["loss"];
    resumed.push_back(r);
  }
  {
    TensorBoardSink sink({.dir = dir / "tensorboard", .resume_step = 60});
    for (const auto& r : resumed) sink.write(r);
  }
  std::vector<nlohmann::json> after_checkpoint;
  for (const auto& r : resumed)
    if (r.value("global_step", int64_t{0}) > 60) after_checkpoint.push_back(r);
  write_jsonl(dir / "metrics.jsonl", after_checkpoint, std::ios::app);
  CHECK(event_files(dir / "tensorboard").size() == 2);
  const auto o = check_with_tensorboard(dir, "--restart-steps 61 --require 'train/loss,guard'");
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("steps 1..120") != std::string::npos);

  // A fresh run in the same directory starts TensorBoard's history anew.
  { TensorBoardSink sink({.dir = dir / "tensorboard"}); }
  CHECK(event_files(dir / "tensorboard").size() == 1);
}

TEST_CASE("Report.TensorBoard.ANewFileSortsAfterEveryEarlierOne") {
  // TensorBoard reads a folder's files in name order; a resume whose clock is
  // behind the file it continues (another machine) must still come last.
  const fs::path dir = test::fresh_dir("tensorboard-order") / "tensorboard";
  fs::create_directories(dir);
  const fs::path ahead = dir / "events.out.tfevents.3000000000.elsewhere";
  std::ofstream(ahead) << "";
  TensorBoardSink sink({.dir = dir, .resume_step = 10});
  CHECK(sink.file().filename().string().rfind("events.out.tfevents.3000000001.", 0) == 0);
  CHECK(event_files(dir).back() == sink.file());
}
