#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_error.hpp"
#include "data/prepare.hpp"
#include "data/shard_set.hpp"
#include "data_fixtures.hpp"

namespace {

using namespace dflow::data;
using dflow::data::test::TempDir;
using dflow::data::test::write_lines;

const std::string kGood = R"({"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]})";

struct Prepared {
  TempDir dir;
  PrepareReport report;
};

// Prepares `lines` (from a file "in.jsonl") with max_length 8 unless `tweak` says otherwise.
template <typename Tweak>
void prepare_lines(Prepared& prepared, const std::vector<std::string>& lines, Tweak tweak) {
  write_lines(prepared.dir / "in.jsonl", lines);
  PrepareOptions options;
  options.input_path = prepared.dir / "in.jsonl";
  options.out_dir = prepared.dir / "out";
  options.max_length = 8;
  options.samples_per_shard = 2;
  tweak(options);
  prepared.report = prepare_jsonl(options);
}

// One bad line between two good ones: the bad one is line 2.
void check_only_rejection(const std::string& bad_line, RejectReason reason, const std::string& detail_part,
                          void (*tweak)(PrepareOptions&) = [](PrepareOptions&) {}) {
  Prepared prepared;
  prepare_lines(prepared, {kGood, bad_line, kGood}, tweak);
  const auto& report = prepared.report;
  REQUIRE(report.rejections.size() == 1);
  CHECK(report.rejections[0].line_number == 2);
  CHECK(report.rejections[0].reason == reason);
  CHECK_MESSAGE(report.rejections[0].detail.find(detail_part) != std::string::npos, report.rejections[0].str());
  CHECK(report.rejections[0].str().rfind("line 2: " + std::string(reject_reason_name(reason)) + ": ", 0) == 0);
  CHECK(report.rejected(reason) == 1);
  CHECK(report.rejected() == 1);
  CHECK(report.samples_written == 2);
}

}  // namespace

TEST_CASE("Prepare.BadJsonIsRejectedWithLineNumber") {
  check_only_rejection(R"({"input_ids": [1, 2,)", RejectReason::BadJson, "parse error at column");
}

TEST_CASE("Prepare.MissingKeyIsRejectedNamingTheKey") {
  check_only_rejection(R"({"input_ids": [1, 2]})", RejectReason::MissingKey, "missing key 'loss_mask'");
  check_only_rejection(R"({"loss_mask": [1, 1]})", RejectReason::MissingKey, "missing key 'input_ids'");
}

TEST_CASE("Prepare.WrongTypeIsRejectedNamingTheValue") {
  check_only_rejection(R"({"input_ids": "1 2", "loss_mask": [1, 1]})", RejectReason::WrongType,
                       "'input_ids' is a string, expected an array");
  check_only_rejection(R"([1, 2])", RejectReason::WrongType, "the line is a JSON array, expected an object");
  check_only_rejection(R"({"input_ids": [1, 2.5], "loss_mask": [1, 1]})", RejectReason::WrongType,
                       "input_ids[1] is 2.5, expected an integer");
  check_only_rejection(R"({"input_ids": [1, 2], "loss_mask": [1, 2]})", RejectReason::WrongType,
                       "loss_mask[1] is 2, expected 0 or 1");
}

TEST_CASE("Prepare.LengthMismatchIsRejectedWithBothLengths") {
  check_only_rejection(R"({"input_ids": [1, 2, 3], "loss_mask": [1, 1]})", RejectReason::LengthMismatch,
                       "input_ids has 3 tokens but loss_mask has 2");
}

TEST_CASE("Prepare.IdOutsideVocabIsRejectedNamingIdAndVocab") {
  check_only_rejection(R"({"input_ids": [1, 100], "loss_mask": [1, 1]})", RejectReason::IdOutOfRange,
                       "input_ids[1] = 100 is outside [0, 100 (vocab_size))",
                       [](PrepareOptions& options) { options.vocab_size = 100; });
  // Without a vocab, negative ids are still refused.
  check_only_rejection(R"({"input_ids": [-3, 1], "loss_mask": [1, 1]})", RejectReason::IdOutOfRange,
                       "input_ids[0] = -3 is outside [0, ");
}

TEST_CASE("Prepare.EmptySampleIsRejected") {
  check_only_rejection(R"({"input_ids": [], "loss_mask": []})", RejectReason::Empty, "empty");
}

TEST_CASE("Prepare.SampleWithoutResponseTokensIsRejected") {
  check_only_rejection(R"({"input_ids": [1, 2, 3], "loss_mask": [0, 0, 0]})", RejectReason::NoResponseTokens,
                       "no response tokens");
  // The response lies beyond max_length 8: nothing is left to train on once cut.
  check_only_rejection(R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "loss_mask": [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]})",
                       RejectReason::NoResponseTokens, "after truncation");
}

TEST_CASE("Prepare.TooLongIsRejectedUnderSkipAndTruncatedUnderTruncate") {
  const std::string long_line =
      R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "loss_mask": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]})";
  check_only_rejection(long_line, RejectReason::TooLong, "10 tokens, longer than max_length 8",
                       [](PrepareOptions& options) { options.too_long = TooLongPolicy::Skip; });

  Prepared prepared;
  prepare_lines(prepared, {kGood, long_line}, [](PrepareOptions&) {});
  CHECK(prepared.report.rejected() == 0);
  CHECK(prepared.report.truncated == 1);
  const auto set = ShardSet::open(prepared.dir / "out");
  REQUIRE(set.size() == 2);
  CHECK(set.lengths()[1] == 8);
  CHECK(std::vector<int32_t>(set.sample(1).input_ids.begin(), set.sample(1).input_ids.end()) ==
        std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("Prepare.TooLongPolicyNamesTheChoices") {
  CHECK(parse_too_long_policy("skip") == TooLongPolicy::Skip);
  CHECK_THROWS_WITH_AS(parse_too_long_policy("drop"), doctest::Contains("use 'truncate' or 'skip'"), DataError);
}

TEST_CASE("Prepare.SummaryCountsEveryOutcome") {
  Prepared prepared;
  prepare_lines(prepared,
                {kGood, "not json", "", R"({"input_ids": [1], "loss_mask": [0]})", kGood,
                 R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9], "loss_mask": [1, 1, 1, 1, 1, 1, 1, 1, 1]})",
                 R"({"input_ids": [1, 2], "loss_mask": [1]})", "{\"input_ids\": [1, 2], \"loss_mask\": [1, 1]}\r"},
                [](PrepareOptions&) {});
  const auto& report = prepared.report;
  CHECK(report.lines_read == 7);
  CHECK(report.blank_lines == 1);
  CHECK(report.samples_written == 4);
  CHECK(report.truncated == 1);
  CHECK(report.tokens_written == 4 + 4 + 8 + 2);
  CHECK(report.response_tokens_written == 2 + 2 + 8 + 2);
  CHECK(report.shards_written == 2);
  CHECK(report.rejected() == 3);
  CHECK(report.rejected(RejectReason::BadJson) == 1);
  CHECK(report.rejected(RejectReason::NoResponseTokens) == 1);
  CHECK(report.rejected(RejectReason::LengthMismatch) == 1);
  // Blank lines keep their number: the rejections are on physical lines 2, 4 and 7.
  REQUIRE(report.rejections.size() == 3);
  CHECK(report.rejections[0].line_number == 2);
  CHECK(report.rejections[1].line_number == 4);
  CHECK(report.rejections[2].line_number == 7);

  const std::string summary = report.summary();
  CHECK(summary.find("7 lines read, 4 samples written (18 tokens") != std::string::npos);
  CHECK(summary.find("1 truncated, 3 rejected (bad_json 1, length_mismatch 1, no_response_tokens 1)") !=
        std::string::npos);
  CHECK(summary.find("in.jsonl:4: no_response_tokens: ") != std::string::npos);
  CHECK(report.summary(1).find("... and 2 more rejected lines") != std::string::npos);
}

TEST_CASE("Prepare.RoundTripKeepsSamplesAndOrder") {
  TempDir dir;
  std::mt19937_64 rng(7);
  std::vector<dflow::data::test::Sample> samples;
  std::vector<std::string> lines;
  for (int i = 0; i < 25; ++i) {
    samples.push_back(dflow::data::test::make_sample(1 + i % 8, rng));
    nlohmann::json line{{"input_ids", samples.back().input_ids}, {"loss_mask", samples.back().loss_mask}};
    lines.push_back(line.dump());
  }
  write_lines(dir / "in.jsonl", lines);
  PrepareOptions options{dir / "in.jsonl", dir / "out", 8, TooLongPolicy::Skip, 1000, 4, false};
  const auto report = prepare_jsonl(options);
  CHECK(report.samples_written == 25);
  CHECK(report.shards_written == 7);
  const auto set = ShardSet::open(dir / "out");
  REQUIRE(set.size() == 25);
  CHECK(set.vocab_size_hint() == 1000);
  for (int64_t i = 0; i < set.size(); ++i) {
    const auto view = set.sample(i);
    CHECK(std::vector<int32_t>(view.input_ids.begin(), view.input_ids.end()) == samples[i].input_ids);
    CHECK(std::vector<uint8_t>(view.loss_mask.begin(), view.loss_mask.end()) == samples[i].loss_mask);
  }
}

TEST_CASE("Prepare.NothingAcceptedLeavesNoOutput") {
  TempDir dir;
  write_lines(dir / "in.jsonl", {"oops", R"({"input_ids": [1], "loss_mask": [0]})"});
  PrepareOptions options;
  options.input_path = dir / "in.jsonl";
  options.out_dir = dir / "out";
  CHECK_THROWS_WITH_AS(prepare_jsonl(options), doctest::Contains("no sample accepted"), DataError);
  // Neither the output nor a temporary directory is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("Prepare.ExistingOutputIsRefusedUnlessOverwrite") {
  Prepared prepared;
  prepare_lines(prepared, {kGood}, [](PrepareOptions&) {});
  PrepareOptions options;
  options.input_path = prepared.dir / "in.jsonl";
  options.out_dir = prepared.dir / "out";
  CHECK_THROWS_WITH_AS(prepare_jsonl(options), doctest::Contains("already exists"), DataError);
  write_lines(prepared.dir / "in.jsonl", {kGood, kGood, kGood});
  options.overwrite = true;
  CHECK(prepare_jsonl(options).samples_written == 3);
  CHECK(ShardSet::open(prepared.dir / "out").size() == 3);
}

TEST_CASE("Prepare.MissingInputNamesThePath") {
  TempDir dir;
  PrepareOptions options;
  options.input_path = dir / "absent.jsonl";
  options.out_dir = dir / "out";
  CHECK_THROWS_WITH_AS(prepare_jsonl(options), doctest::Contains("absent.jsonl: cannot open"), DataError);
  CHECK_FALSE(std::filesystem::exists(dir / "out"));
}
