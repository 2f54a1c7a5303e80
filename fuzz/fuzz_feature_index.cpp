// A feature cache shard's index (data/feature_cache.cpp read_index and
// FeatureCacheReader): the input is the .idx file, read as it is and again
// with its trailing checksum repaired, beside a .bin of the size its header
// claims (up to 1 MiB; else one byte short, the truncated case) and a
// manifest that matches its dtype and width, so that its entries are mapped
// and every sample is read. Only DataError may come out; a sample the reader
// serves must lie inside its shard.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/feature_cache.hpp"
#include "fuzz/fuzz_common.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dflow::data;

constexpr size_t kHeaderBytes = 40;  // magic, version, dtype, width, count, bin_bytes

template <class T>
T field_at(const std::vector<unsigned char>& bytes, size_t offset) {
  T value{};
  if (bytes.size() >= offset + sizeof value) std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

void read(const std::vector<unsigned char>& idx) {
  const fs::path dir = dflow::fuzz::scratch_dir() / "cache";
  fs::remove_all(dir);
  fs::create_directories(dir / "shards");
  dflow::fuzz::write_file(dir / "shards" / "f-000000.idx", idx.data(), idx.size());
  const auto dtype = field_at<uint32_t>(idx, 12);
  const auto width = field_at<int64_t>(idx, 16);
  const auto bin_bytes = field_at<uint64_t>(idx, 32);
  FeatureCacheManifest m;
  m.target_config = m.target_weights = m.tokenizer = "x";
  m.target_dtype = "float32";
  m.layer_ids = {0};
  m.hidden_size = width >= 1 && width <= 4096 ? width : 4;
  m.dtype = dtype >= 1 && dtype <= 3 ? static_cast<FeatureDtype>(dtype) : FeatureDtype::float32;
  try {
    create_or_check_manifest(dir, m);
  } catch (const DataError&) {
    std::abort();  // our own manifest
  }
  const uint64_t bin_size = bin_bytes <= (uint64_t{1} << 20) ? bin_bytes : 4096;
  const std::vector<unsigned char> bin(bin_size, 0x5a);
  dflow::fuzz::write_file(dir / "shards" / "f-000000.bin", bin.data(), bin.size());
  try {
    FeatureCacheReader reader(dir);
    for (int64_t id = -2; id < 64; ++id) {
      if (!reader.contains(id)) continue;
      try {
        const auto record = reader.get(id, /*verify=*/true);
        if (record.bytes.size() > bin.size()) std::abort();
      } catch (const DataError&) {
      }
    }
  } catch (const DataError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  read(bytes);
  if (bytes.size() >= kHeaderBytes + sizeof(uint64_t)) {
    const uint64_t sum = dflow::data::xxhash64(bytes.data(), bytes.size() - sizeof sum);
    std::memcpy(bytes.data() + bytes.size() - sizeof sum, &sum, sizeof sum);
    read(bytes);
  }
  return 0;
}
