#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/shard_format.hpp"
#include "data/shard_set.hpp"
#include "data/shard_writer.hpp"
#include "data_fixtures.hpp"

namespace {

using namespace dflow::data;
using dflow::data::test::TempDir;
using dflow::data::test::write_dataset;

void flip_byte(const std::filesystem::path& path, uint64_t offset_bytes) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset_bytes));
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  file.seekp(static_cast<std::streamoff>(offset_bytes));
  file.write(&byte, 1);
}

// Byte offset of sample `i`'s record in its shard (all in shard 0).
uint64_t record_offset(const std::vector<int>& lengths, size_t i) {
  uint64_t offset = sizeof(format::ShardHeader);
  for (size_t k = 0; k < i; ++k) offset += format::record_bytes(static_cast<uint64_t>(lengths[k]));
  return offset;
}

std::string open_error(const std::filesystem::path& dir, OpenOptions options = {}) {
  try {
    ShardSet::open(dir, options);
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

const std::vector<int> kLengths{5, 17, 3, 64, 1, 9, 33, 2};

}  // namespace

TEST_CASE("ShardSet.RoundTripReadsBackEverySample") {
  TempDir dir;
  const auto samples = write_dataset(dir / "ds", kLengths, 11, /*samples_per_shard=*/3, /*vocab_size=*/1000);
  const auto set = ShardSet::open(dir / "ds");
  CHECK(set.size() == 8);
  CHECK(set.num_shards() == 3);
  CHECK(set.num_tokens() == 134);
  CHECK(std::vector<int32_t>(set.lengths().begin(), set.lengths().end()) ==
        std::vector<int32_t>(kLengths.begin(), kLengths.end()));
  CHECK(set.vocab_size_hint() == 1000);
  int32_t max_id = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto view = set.sample(static_cast<int64_t>(i));
    CHECK(std::vector<int32_t>(view.input_ids.begin(), view.input_ids.end()) == samples[i].input_ids);
    CHECK(std::vector<uint8_t>(view.loss_mask.begin(), view.loss_mask.end()) == samples[i].loss_mask);
    for (const int32_t id : samples[i].input_ids) max_id = std::max(max_id, id);
  }
  CHECK(set.max_token_id() == max_id);
  CHECK_THROWS_WITH_AS(set.sample(8), doctest::Contains("sample 8 does not exist"), DataError);
}

TEST_CASE("ShardSet.FingerprintFollowsTheData") {
  TempDir dir;
  write_dataset(dir / "a", kLengths, 1);
  write_dataset(dir / "same", kLengths, 1);
  write_dataset(dir / "other_tokens", kLengths, 2);  // same lengths, other token ids
  const uint64_t fingerprint = ShardSet::open(dir / "a").fingerprint();
  CHECK(ShardSet::open(dir / "same").fingerprint() == fingerprint);
  CHECK(ShardSet::open(dir / "other_tokens").fingerprint() != fingerprint);
}

TEST_CASE("ShardSet.TruncatedShardIsRefusedNamingFileAndOffset") {
  TempDir dir;
  write_dataset(dir / "ds", kLengths, 3, /*samples_per_shard=*/4);
  const auto shard = dir / "ds" / "shard-00001.bin";
  const auto cut_size = std::filesystem::file_size(shard) - 7;
  std::filesystem::resize_file(shard, cut_size);
  const std::string message = open_error(dir / "ds");
  CHECK_MESSAGE(message.find("shard-00001.bin: at byte offset " + std::to_string(cut_size) + ": truncated") !=
                    std::string::npos,
                message);
  CHECK(message.find("re-run dflow prepare") != std::string::npos);
}

TEST_CASE("ShardSet.FlippedByteInASampleIsRefusedNamingFileAndOffset") {
  TempDir dir;
  write_dataset(dir / "ds", kLengths, 4);
  // A byte inside sample 3's loss mask.
  const uint64_t sample_offset = record_offset(kLengths, 3);
  flip_byte(dir / "ds" / "shard-00000.bin", sample_offset + 4 * kLengths[3] + 10);
  const std::string message = open_error(dir / "ds");
  CHECK_MESSAGE(message.find("shard-00000.bin: at byte offset " + std::to_string(sample_offset) + ": sample 3") !=
                    std::string::npos,
                message);
  CHECK(message.find("does not match its checksum") != std::string::npos);

  // Without the full check at open, the sample is refused when verified.
  const auto set = ShardSet::open(dir / "ds", OpenOptions{.verify_checksums = false});
  CHECK_NOTHROW(set.verify_sample(2));
  const std::string expected = "at byte offset " + std::to_string(sample_offset);
  CHECK_THROWS_WITH_AS(set.verify_sample(3), doctest::Contains(expected.c_str()), DataError);
}

TEST_CASE("ShardSet.FlippedByteInAShardHeaderIsRefused") {
  TempDir dir;
  write_dataset(dir / "ds", kLengths, 5);
  flip_byte(dir / "ds" / "shard-00000.bin", 20);
  CHECK(open_error(dir / "ds").find("shard-00000.bin: at byte offset 0: header") != std::string::npos);
}

TEST_CASE("ShardSet.CorruptOrTruncatedIndexIsRefused") {
  TempDir dir;
  write_dataset(dir / "ds", kLengths, 6);
  const auto index = dir / "ds" / format::kIndexFileName;
  SUBCASE("flipped byte in the body") {
    flip_byte(index, sizeof(format::IndexHeader) + 40);
    const auto message = open_error(dir / "ds");
    CHECK_MESSAGE(message.find("index.bin: at byte offset 80: body") != std::string::npos, message);
    CHECK(message.find("does not match its checksum") != std::string::npos);
  }
  SUBCASE("truncated") {
    const auto cut_size = std::filesystem::file_size(index) - 8;
    std::filesystem::resize_file(index, cut_size);
    CHECK(open_error(dir / "ds").find("index.bin: at byte offset " + std::to_string(cut_size) + ": truncated") !=
          std::string::npos);
  }
  SUBCASE("another format version") {
    std::fstream file(index, std::ios::in | std::ios::out | std::ios::binary);
    const uint32_t future_version = format::kFormatVersion + 1;
    file.seekp(8);
    file.write(reinterpret_cast<const char*>(&future_version), sizeof future_version);
    file.close();
    CHECK(open_error(dir / "ds").find("index.bin: at byte offset 8: format version 2, this build reads version 1") !=
          std::string::npos);
  }
  SUBCASE("missing shard") {
    std::filesystem::remove(dir / "ds" / "shard-00000.bin");
    CHECK(open_error(dir / "ds").find("shard-00000.bin: cannot open") != std::string::npos);
  }
  SUBCASE("not a dataset") {
    CHECK(open_error(dir.path()).find("index.bin: cannot open") != std::string::npos);
  }
}

TEST_CASE("Dataset.ConcatenatesDirectoriesWithGlobalIds") {
  TempDir dir;
  const auto first = write_dataset(dir / "a", {4, 5, 6}, 1);
  const auto second = write_dataset(dir / "b", {7, 8}, 2);
  const auto dataset = Dataset::open({(dir / "a").string(), (dir / "b").string()});
  CHECK(dataset.size() == 5);
  CHECK(dataset.num_tokens() == 30);
  CHECK(std::vector<int32_t>(dataset.lengths().begin(), dataset.lengths().end()) ==
        std::vector<int32_t>{4, 5, 6, 7, 8});
  const auto view = dataset.sample(3);
  CHECK(std::vector<int32_t>(view.input_ids.begin(), view.input_ids.end()) == second[0].input_ids);
  CHECK(dataset.sample(2).input_ids[0] == first[2].input_ids[0]);
  CHECK_THROWS_WITH_AS(dataset.sample(5), doctest::Contains("sample 5 does not exist"), DataError);

  // Order matters to the plan: the fingerprint of b+a differs from a+b.
  const auto swapped = Dataset::open({(dir / "b").string(), (dir / "a").string()});
  CHECK(swapped.fingerprint() != dataset.fingerprint());
  CHECK_THROWS_WITH_AS(Dataset::open({(dir / "a").string(), (dir / "a" / ".").string()}),
                       doctest::Contains("twice"), DataError);
}

TEST_CASE("ShardWriter.AnAbandonedWriteLeavesNothingThatLooksValid") {
  TempDir dir;
  {
    ShardWriter writer(dir / "ds", ShardWriterOptions{2, 0, false});
    const std::vector<int32_t> ids{1, 2, 3};
    const std::vector<uint8_t> mask{0, 1, 1};
    for (int i = 0; i < 5; ++i) writer.add(ids, mask);
    // Destroyed without finish(), as when prepare throws half-way.
  }
  CHECK(std::filesystem::is_empty(dir.path()));
  CHECK_THROWS_WITH_AS(ShardSet::open(dir / "ds"), doctest::Contains("not a directory"), DataError);
}
