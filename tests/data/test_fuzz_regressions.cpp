// Inputs the fuzz targets (fuzz/, tools/fuzz.sh) found to break a data
// reader, kept as tests of the fix. fuzz/RESULTS.md lists each finding.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/jsonl_sample.hpp"
#include "data/shard_format.hpp"
#include "data/shard_index.hpp"
#include "data_fixtures.hpp"

namespace {

using namespace dflow::data;
using dflow::data::test::TempDir;

// index.bin with this header and body; the checksums made to match, so that
// only the checks behind them can refuse it.
void write_index(const std::filesystem::path& path, format::IndexHeader header, const std::vector<unsigned char>& body) {
  std::memcpy(header.magic, format::kIndexMagic, sizeof header.magic);
  header.format_version = format::kFormatVersion;
  header.header_bytes = sizeof header;
  header.body_checksum = xxhash64(body.data(), body.size());
  header.header_checksum = xxhash64(&header, offsetof(format::IndexHeader, header_checksum));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header), sizeof header);
  out.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
}

template <typename T>
void append(std::vector<unsigned char>& body, const T& value) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
  body.insert(body.end(), bytes, bytes + sizeof value);
}

std::string index_error(const std::filesystem::path& path) {
  try {
    read_shard_index(path);
  } catch (const DataError& error) {
    return error.what();
  }
  FAIL("expected a DataError for " << path.string());  // and any other exception fails the test too
  return {};
}

}  // namespace

TEST_CASE("DataFuzz.NumberTooLargeForADoubleIsBadJson") {
  // fuzz_jsonl_sample: nlohmann's out_of_range 406 ("number overflow") escaped
  // parse_jsonl_sample, which caught parse_error only.
  ParsedSample sample;
  const auto rejection = parse_jsonl_sample(R"({"input_ids": [1E400], "loss_mask": [1]})", 7, SampleRules{}, sample);
  REQUIRE(rejection.has_value());
  CHECK(rejection->reason == RejectReason::BadJson);
  CHECK_MESSAGE(rejection->str().find("line 7: bad_json: number overflow") == 0, rejection->str());
}

TEST_CASE("DataFuzz.IndexCountsBeyondTheFileAreRefused") {
  // fuzz_shard_index: 2^62 samples make the body size 12 * 2^62 = 0 (mod 2^64),
  // which matched an empty body; the reader then tried to allocate 2^62 lengths
  // (std::length_error instead of a DataError naming the file).
  TempDir dir;
  format::IndexHeader header{};
  header.num_samples = uint64_t{1} << 62;
  header.max_token_id = -1;
  write_index(dir / "index.bin", header, {});
  const auto message = index_error(dir / "index.bin");
  CHECK_MESSAGE(message.find("index.bin: at byte offset 16: header says 0 shards and 4611686018427387904 samples, "
                             "more than the file's 80 bytes can hold") != std::string::npos,
                message);
}

TEST_CASE("DataFuzz.ShardWhoseSampleRangeWrapsAroundIsRefused") {
  // Found reading check_consistency while fixing the above: first_sample +
  // num_samples could wrap around 2^64, so a shard "covering" 2^64 - 1 samples
  // passed as one covering none, and a later shard could cover samples again.
  TempDir dir;
  const std::vector<int32_t> lengths{3, 2};
  std::vector<unsigned char> body;
  append(body, format::ShardEntry{0, 1, 3, sizeof(format::ShardHeader) + format::record_bytes(3)});
  append(body, format::ShardEntry{1, ~uint64_t{0}, 0, sizeof(format::ShardHeader)});
  append(body, format::ShardEntry{0, 2, 5, sizeof(format::ShardHeader) + format::record_bytes(3) + format::record_bytes(2)});
  for (const int32_t length : lengths) append(body, length);
  for (size_t i = 0; i < lengths.size(); ++i) append(body, uint64_t{0});
  format::IndexHeader header{};
  header.num_shards = 3;
  header.num_samples = lengths.size();
  header.num_tokens = 5;
  header.max_token_id = 1;
  header.body_bytes = body.size();
  REQUIRE(body.size() == format::index_body_bytes(3, 2));
  write_index(dir / "index.bin", header, body);
  const auto message = index_error(dir / "index.bin");
  CHECK_MESSAGE(message.find("index.bin: at byte offset 112: shard 1 covers samples that do not follow the previous "
                             "shard") != std::string::npos,
                message);
}

TEST_CASE("DataFuzz.EmptyIndexRoundTrips") {
  // fuzz_shard_index, fuzz_shard_set: an index of no shards and no samples
  // passed null pointers to memcpy and did pointer arithmetic on null in
  // xxhash64 (undefined behaviour; UBSan reports it, so this test fails in a
  // sanitizer build without the fix, not in a plain one).
  TempDir dir;
  write_shard_index(dir / "index.bin", ShardIndex{});
  const ShardIndex index = read_shard_index(dir / "index.bin");
  CHECK(index.num_samples() == 0);
  CHECK(index.shards.empty());
  CHECK(xxhash64(nullptr, 0) == xxhash64("", 0));
}
