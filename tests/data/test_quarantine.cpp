// The quarantine file and dropping quarantined rows from a planned batch.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "data/data_error.hpp"
#include "data/quarantine.hpp"

namespace fs = std::filesystem;
using namespace dflow::data;

namespace {
fs::path temp_file(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("dflow-quarantine-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = dir / name;
  fs::remove(path);
  return path;
}
}  // namespace

TEST_CASE("Quarantine.File.appends_and_reads_back_every_id") {
  auto path = temp_file("q.jsonl");
  CHECK(read_quarantine(path).empty());  // absent: nothing quarantined
  append_quarantine(path, 31, "loss 41 > spike threshold 9", {803, 17});
  append_quarantine(path, 40, "rollback", {5, 17});
  CHECK(read_quarantine(path) == SampleSet{5, 17, 803});
}

TEST_CASE("Quarantine.File.released_samples_leave_it_in_line_order") {
  // A run of spikes the guard later took as a new level: its samples come back.
  auto path = temp_file("release.jsonl");
  std::ofstream(path) << "{\"global_step\": 12, \"sample_ids\": [7, 8]}\n"
                         "{\"global_step\": 15, \"sample_ids\": [1, 2]}\n"
                         "{\"global_step\": 16, \"sample_ids\": [3]}\n"
                         "{\"global_step\": 18, \"released_sample_ids\": [1, 2, 3]}\n"
                         "{\"global_step\": 40, \"sample_ids\": [2]}\n";
  CHECK(read_quarantine(path) == SampleSet{2, 7, 8});
  // Applied over a start set (a checkpoint's): a release takes back from it too.
  CHECK(read_quarantine(path, SampleSet{1, 9}) == SampleSet{2, 7, 8, 9});
  CHECK(read_quarantine(temp_file("absent.jsonl"), SampleSet{4}) == SampleSet{4});
}

TEST_CASE("Quarantine.File.a_corrupt_line_is_named_a_torn_last_line_is_ignored") {
  auto path = temp_file("bad.jsonl");
  std::ofstream(path) << "{\"global_step\": 1, \"sample_ids\": [1, 2]}\n{\"sample_ids\": [3, \"x\"]}\n";
  const std::string line_2 = path.string() + ":2: sample id \"x\"", line_1 = path.string() + ":1: not valid JSON";
  CHECK_THROWS_WITH_AS(read_quarantine(path), doctest::Contains(line_2.c_str()), DataError);
  std::ofstream(path) << "oops\n{\"sample_ids\": [3]}\n";
  CHECK_THROWS_WITH_AS(read_quarantine(path), doctest::Contains(line_1.c_str()), DataError);
  std::ofstream(path) << "{\"sample_ids\": [1]}\n{\"released_sample_ids\": 2}\n";
  const std::string release_2 = path.string() + ":2: \"released_sample_ids\" is not a list";
  CHECK_THROWS_WITH_AS(read_quarantine(path), doctest::Contains(release_2.c_str()), DataError);
  std::ofstream(path) << "{\"sample_ids\": [1]}\n{\"sample_ids\": [2, 3";  // a crash mid-append
  CHECK(read_quarantine(path) == SampleSet{1});
}

TEST_CASE("Quarantine.Batch.rows_are_dropped_and_token_counts_recomputed") {
  const std::vector<int32_t> lengths{10, 20, 30, 40};
  PlannedBatch batch;
  batch.padded_length = 64;
  batch.sample_ids = {3, 1, 2};
  batch.real_tokens = 90;
  batch.padded_tokens = 192;
  auto kept = without_samples(batch, {1, 0}, lengths);
  CHECK(kept.sample_ids == std::vector<int64_t>{3, 2});
  CHECK(kept.real_tokens == 70);
  CHECK(kept.padded_tokens == 128);
  CHECK(without_samples(batch, {1, 2, 3}, lengths).rows() == 0);
}
