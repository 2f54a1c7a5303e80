// The feature cache's files without torch: records written by writers are
// read back bit for bit once published; a killed writer's open shard is
// never read and its numbering continues; a truncated shard, a corrupt index
// or record, and a manifest of something else are refused naming the file,
// the sample or the field.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/feature_cache.hpp"
#include "data_fixtures.hpp"

using dflow::testing::error_of;

namespace {

using namespace dflow::data;
using dflow::data::test::TempDir;
namespace fs = std::filesystem;

constexpr int64_t kWidth = 6;  // values a position, float32 storage: 24 bytes a row

FeatureCacheManifest manifest() {
  FeatureCacheManifest m;
  m.target_config = "c0ffee";
  m.target_weights = "beef";
  m.tokenizer = "none";
  m.target_dtype = "float32";
  m.layer_ids = {1, 2, 3};
  m.hidden_size = 2;
  m.dtype = FeatureDtype::float32;
  m.source = "test";
  return m;
}

// Sample `id`'s record: `rows` rows whose bytes all say which sample and row.
std::vector<unsigned char> record(int64_t id, int64_t rows) {
  std::vector<unsigned char> bytes(static_cast<size_t>(rows) * feature_row_bytes(FeatureDtype::float32, kWidth));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(id * 31 + i);
  return bytes;
}

void write_samples(const fs::path& dir, const std::string& writer, int64_t first, int64_t count, uint64_t shard_bytes) {
  FeatureCacheWriter w(dir, writer, FeatureDtype::float32, kWidth, shard_bytes);
  for (int64_t id = first; id < first + count; ++id) w.append(id, 1000 + id, 3 + id % 5, record(id, 3 + id % 5));
}

std::vector<fs::path> files(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir / "shards"))
    if (e.path().string().size() > ext.size() && e.path().string().ends_with(ext)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("FeatureCacheFiles.records_round_trip_across_shards_and_writers") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  write_samples(dir.path(), "r0", 0, 20, 200);   // several shards of ~200 bytes
  write_samples(dir.path(), "r1", 20, 10, 1 << 20);
  FeatureCacheReader reader(dir.path());
  CHECK(reader.num_samples() == 30);
  CHECK(files(dir.path(), ".idx").size() > 3);
  for (int64_t id = 0; id < 30; ++id) {
    const auto r = reader.get(id);
    const auto expected = record(id, 3 + id % 5);
    CHECK(r.rows == 3 + id % 5);
    CHECK(r.tokens_hash == static_cast<uint64_t>(1000 + id));
    CHECK(std::equal(r.bytes.begin(), r.bytes.end(), expected.begin(), expected.end()));
  }
  const std::vector<int64_t> ids{3, 30, 29, 31};
  CHECK(reader.missing(ids) == std::vector<int64_t>{30, 31});
  CHECK(error_of([&] { reader.get(30); }).find("no features for sample 30") != std::string::npos);
}

TEST_CASE("FeatureCacheFiles.an_unpublished_shard_is_never_read_and_a_new_writer_continues") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  {
    FeatureCacheWriter w(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);
    w.append(0, 0, 2, record(0, 2));
    CHECK(w.publish().has_value());
    w.append(1, 1, 2, record(1, 2));
    FeatureCacheReader reader(dir.path());  // sample 1 is in the open shard: not visible
    CHECK(reader.contains(0));
    CHECK_FALSE(reader.contains(1));
    CHECK(files(dir.path(), ".bin.tmp").size() == 1);
  }  // the destructor publishes it; a kill would have left it as a .tmp:
  fs::remove(files(dir.path(), ".idx").back());
  fs::rename(files(dir.path(), ".bin").back(), dir.path() / "shards" / "r0-000001.bin.tmp");
  REQUIRE(FeatureCacheReader(dir.path()).num_samples() == 1);
  {
    FeatureCacheWriter again(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);  // removes the leftover
    CHECK(files(dir.path(), ".tmp").empty());
    again.append(1, 1, 2, record(1, 2));
  }
  FeatureCacheReader reader(dir.path());
  CHECK(reader.num_samples() == 2);
  CHECK(fs::exists(dir.path() / "shards" / "r0-000001.idx"));  // numbering went on after the published one
}

TEST_CASE("FeatureCacheFiles.a_writer_name_is_held_by_one_writer_at_a_time") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  auto refusal = [&] {
    return error_of([&] { FeatureCacheWriter second(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20); });
  };
  SUBCASE("a second writer of the name in this process is refused; the first one's shard survives") {
    {
      FeatureCacheWriter first(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);
      first.append(0, 0, 2, record(0, 2));
      const auto e = refusal();
      CHECK_MESSAGE(e.find("feature cache " + dir.path().string() + ": writer 'r0' is in use") != std::string::npos, e);
      CHECK_MESSAGE(e.find("pid " + std::to_string(::getpid())) != std::string::npos, e);
      CHECK(files(dir.path(), ".bin.tmp").size() == 1);  // its open shard was not removed
      // Another name is another writer.
      CHECK_NOTHROW(FeatureCacheWriter(dir.path(), "r1", FeatureDtype::float32, kWidth, 1 << 20));
    }
    CHECK(FeatureCacheReader(dir.path()).contains(0));
    CHECK(refusal().empty());  // released with the writer
  }
  SUBCASE("another live process's writer is refused naming its pid") {
    int ready[2], done[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(done) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      FeatureCacheWriter held(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);
      char c = 1;
      (void)!::write(ready[1], &c, 1);
      (void)!::read(done[0], &c, 1);  // until the parent has tried
      ::_exit(0);
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    const auto e = refusal();
    (void)!::write(done[1], &c, 1);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK_MESSAGE(e.find("writer 'r0' is in use by another filler (pid " + std::to_string(child) + ",") != std::string::npos, e);
  }
  SUBCASE("a killed writer's lock does not block: the kernel released it") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto* w = new FeatureCacheWriter(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);
      w->append(5, 5, 2, record(5, 2));
      ::_exit(0);  // no destructor: as a kill leaves it (lock file and open shard)
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(files(dir.path(), ".bin.tmp").size() == 1);
    CHECK(fs::exists(dir.path() / "shards" / "r0.lock"));
    {
      FeatureCacheWriter again(dir.path(), "r0", FeatureDtype::float32, kWidth, 1 << 20);
      CHECK(files(dir.path(), ".bin.tmp").empty());  // the dead writer's leftover is removed
    }
    CHECK(FeatureCacheReader(dir.path()).num_samples() == 0);
  }
}

TEST_CASE("FeatureCacheFiles.the_writer_says_which_samples_are_unpublished_and_the_reader_counts_duplicates") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  {
    // 24-byte rows, 100-byte shards: the shard fills at the third sample (3 x 48 bytes).
    FeatureCacheWriter w(dir.path(), "r0", FeatureDtype::float32, kWidth, 100);
    w.append(0, 0, 2, record(0, 2));
    w.append(1, 1, 2, record(1, 2));
    CHECK(w.unpublished(0));
    CHECK(w.unpublished_samples() == 2);
    w.append(2, 2, 2, record(2, 2));  // publishes 0, 1, 2
    CHECK_FALSE(w.unpublished(1));
    w.append(3, 3, 2, record(3, 2));
    CHECK(w.unpublished(3));
    CHECK(w.unpublished_samples() == 1);
    CHECK(FeatureCacheReader(dir.path()).num_samples() == 3);
  }
  write_samples(dir.path(), "r1", 2, 1, 1 << 20);  // sample 2 again, by another writer
  FeatureCacheReader reader(dir.path());
  CHECK(reader.num_samples() == 4);
  CHECK(reader.duplicate_records() == 1);
  REQUIRE(reader.entry(3).has_value());
  CHECK(reader.entry(3)->rows == 2);
  CHECK_FALSE(reader.entry(9).has_value());
}

TEST_CASE("FeatureCacheFiles.corruption_is_named") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  write_samples(dir.path(), "r0", 0, 12, 150);
  const auto bins = files(dir.path(), ".bin"), idx = files(dir.path(), ".idx");
  REQUIRE(bins.size() > 1);

  SUBCASE("a flipped record byte fails that sample's checksum") {
    {
      std::fstream f(bins[0], std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(5);
      f.put('\x7f');
    }
    FeatureCacheReader reader(dir.path());
    const auto e = error_of([&] { reader.get(0); });
    CHECK(e.find(bins[0].string() + ": sample 0") != std::string::npos);
    CHECK(e.find("fails its checksum") != std::string::npos);
    CHECK_NOTHROW(reader.get(0, /*verify=*/false));
  }
  SUBCASE("a truncated shard names the samples it loses") {
    fs::resize_file(bins[0], fs::file_size(bins[0]) - 10);
    const auto e = error_of([&] { FeatureCacheReader reader(dir.path()); });
    CHECK(e.find(bins[0].string() + " is truncated") != std::string::npos);
    CHECK(e.find("samples [") != std::string::npos);
  }
  SUBCASE("a corrupt index fails its checksum") {
    {
      std::fstream f(idx[0], std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(50);
      f.put('\x01');
    }
    const auto e = error_of([&] { FeatureCacheReader reader(dir.path()); });
    CHECK(e.find(idx[0].string()) != std::string::npos);
    CHECK(e.find("fails its checksum") != std::string::npos);
  }
}

TEST_CASE("FeatureCacheFiles.a_manifest_of_something_else_is_refused_naming_the_fields") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  CHECK_NOTHROW(create_or_check_manifest(dir.path(), manifest()));  // the same: fine (ranks race to write it)
  auto other = manifest();
  other.layer_ids = {1, 2, 4};
  other.target_weights = "f00d";
  other.dtype = FeatureDtype::bfloat16;
  const auto e = error_of([&] { create_or_check_manifest(dir.path(), other); });
  CHECK(e.find("layer ids: cache [1, 2, 3], this run [1, 2, 4]") != std::string::npos);
  CHECK(e.find("target weights (fingerprint): cache beef, this run f00d") != std::string::npos);
  CHECK(e.find("storage dtype: cache float32, asked bfloat16") != std::string::npos);
  CHECK(read_manifest(dir.path()).layer_ids == std::vector<int64_t>{1, 2, 3});
  CHECK(error_of([&] { read_manifest(dir.path() / "nowhere"); }).find("does not exist") != std::string::npos);
  std::ofstream(dir.path() / "manifest.json") << "{\"version\": 1}";
  CHECK(error_of([&] { read_manifest(dir.path()); }).find("field 'target'") != std::string::npos);
}

TEST_CASE("FeatureCacheFiles.dtypes_sizes_and_free_space") {
  CHECK(parse_feature_dtype("bf16") == FeatureDtype::bfloat16);
  CHECK(parse_feature_dtype("float8_e4m3") == FeatureDtype::float8_e4m3);
  CHECK(error_of([] { parse_feature_dtype("int8"); }).find("float32 (exact), bfloat16") != std::string::npos);
  // Qwen3-8B, 5 layers of 4096: bytes a token.
  CHECK(feature_row_bytes(FeatureDtype::float32, 5 * 4096) == 81920);
  CHECK(feature_row_bytes(FeatureDtype::bfloat16, 5 * 4096) == 40960);
  CHECK(feature_row_bytes(FeatureDtype::float8_e4m3, 5 * 4096) == 20484);
  TempDir dir;
  const auto e = error_of([&] { check_free_space(dir.path() / "cache", uint64_t{1} << 62, "the feature cache"); });
  CHECK(e.find("the feature cache needs 4611686.02 TB more in " + (dir.path() / "cache").string()) != std::string::npos);
  CHECK(e.find("free") != std::string::npos);
  CHECK_NOTHROW(check_free_space(dir.path(), 1, "x"));
}

namespace {

// A shard's .idx as the writer lays it out, with a valid checksum: a crafted
// file passes every check but the ones on its numbers.
void write_crafted_index(const fs::path& idx, uint64_t count, const std::vector<FeatureIndexEntry>& entries, uint64_t bin_bytes) {
  std::vector<unsigned char> bytes(40);
  std::memcpy(bytes.data(), "DFLFIDX1", 8);
  const uint32_t version = 1, dtype = static_cast<uint32_t>(FeatureDtype::float32);
  const int64_t width = kWidth;
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 12, &dtype, 4);
  std::memcpy(bytes.data() + 16, &width, 8);
  std::memcpy(bytes.data() + 24, &count, 8);
  std::memcpy(bytes.data() + 32, &bin_bytes, 8);
  for (const auto& e : entries) {
    const auto* p = reinterpret_cast<const unsigned char*>(&e);
    bytes.insert(bytes.end(), p, p + sizeof e);
  }
  const uint64_t sum = dflow::data::xxhash64(bytes.data(), bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(&sum);
  bytes.insert(bytes.end(), s, s + sizeof sum);
  std::ofstream(idx, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("FeatureCacheFiles.crafted_index_numbers_that_would_wrap_are_refused") {
  TempDir dir;
  create_or_check_manifest(dir.path(), manifest());
  fs::create_directories(dir.path() / "shards");
  const fs::path idx = dir.path() / "shards" / "x-000000.idx", bin = dir.path() / "shards" / "x-000000.bin";
  std::ofstream(bin, std::ios::binary) << std::string(48, 'a');  // two rows of 24 bytes
  SUBCASE("a count whose size in bytes wraps to the file's") {
    // 2^64 / 40 entries and one more: count x 40 wraps to 40, one entry's room.
    const uint64_t count = (~uint64_t{0}) / 40 + 2;
    write_crafted_index(idx, count, {FeatureIndexEntry{0, 0, 2, 0, 0}}, 48);
    const auto e = error_of([&] { FeatureCacheReader reader(dir.path()); });
    CHECK_MESSAGE(e.find(idx.string() + ": 88 bytes hold 1 entries, its header says " + std::to_string(count)) != std::string::npos, e);
  }
  SUBCASE("an entry whose offset plus rows x row bytes wraps past the shard's end") {
    // rows x 24 wraps to a few bytes: offset + that would look inside the 48.
    const uint64_t rows = (~uint64_t{0}) / 24 + 1;
    write_crafted_index(idx, 1, {FeatureIndexEntry{7, 8, rows, 0, 0}}, 48);
    const auto e = error_of([&] { FeatureCacheReader reader(dir.path()); });
    CHECK_MESSAGE(e.find("sample 7 lies past the end of its shard") != std::string::npos, e);
  }
}

TEST_CASE("FeatureCacheFiles.manifest_numbers_must_be_integers_of_a_model") {
  const fs::path file = "cache/manifest.json";
  auto with = [](const std::string& key, const std::string& value) {
    auto j = nlohmann::json::parse(manifest().to_json());
    j[key] = nlohmann::json::parse(value);
    return j.dump();
  };
  // A float where an integer goes: nlohmann's conversion of 6.7e50 to int was undefined.
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("version", "6.7e50"), file); }) ==
        "cache/manifest.json: 'version' must be an integer, got 6.7e+50");
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("hidden_size", "1.5"), file); }).find("'hidden_size' must be an integer") !=
        std::string::npos);
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("layer_ids", "[1, 2.5]"), file); }).find("'layer_ids' holds 2.5") !=
        std::string::npos);
  // Sizes that would overflow width() and a row's bytes.
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("hidden_size", "4611686018427387904"), file); })
            .find("hidden_size 4611686018427387904 is no model's") != std::string::npos);
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("hidden_size", "0"), file); }).find("is no model's") != std::string::npos);
  CHECK(error_of([&] { FeatureCacheManifest::from_json(with("layer_ids", "[]"), file); }).find("layer_ids has 0 layers") !=
        std::string::npos);
  CHECK_NOTHROW(FeatureCacheManifest::from_json(manifest().to_json(), file));
}
