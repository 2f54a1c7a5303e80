// A whole prepared dataset directory (data/shard_set.cpp ShardSet::open):
// the input is index.bin followed by the shard files. index.bin takes its
// header's size (80 + body_bytes); each shard then takes the size its index
// entry names, the last one the rest. Checksums of the index and of the shard
// headers are repaired (shard_fixup.hpp); record checksums are not, so the
// set is opened without verifying them and every sample is then read and
// verified one by one. Only DataError may come out.
#include <algorithm>
#include <cstring>
#include <vector>

#include "data/data_error.hpp"
#include "data/shard_set.hpp"
#include "fuzz/fuzz_common.hpp"
#include "fuzz/shard_fixup.hpp"

namespace {

constexpr uint64_t kMaxShards = 4;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::data;
  namespace fs = std::filesystem;
  const fs::path dir = dflow::fuzz::scratch_dir() / "dataset";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);

  format::IndexHeader header{};
  size_t index_size = size;
  if (size >= sizeof header) {
    std::memcpy(&header, data, sizeof header);
    index_size = sizeof header + std::min<uint64_t>(header.body_bytes, size - sizeof header);
  }
  std::vector<unsigned char> index(data, data + index_size);
  dflow::fuzz::fix_index_checksums(index);
  dflow::fuzz::write_file(dir / format::kIndexFileName, index.data(), index.size());

  size_t pos = index_size;
  const uint64_t num_shards = std::min(header.num_shards, kMaxShards);
  for (uint64_t s = 0; s < num_shards; ++s) {
    size_t length = size - pos;
    const size_t entry_at = sizeof header + s * sizeof(format::ShardEntry);
    if (s + 1 < num_shards && entry_at + sizeof(format::ShardEntry) <= index_size) {
      format::ShardEntry entry;
      std::memcpy(&entry, data + entry_at, sizeof entry);
      length = std::min<uint64_t>(length, entry.file_bytes);
    }
    std::vector<unsigned char> shard(data + pos, data + pos + length);
    pos += length;
    dflow::fuzz::fix_shard_checksum(shard);
    dflow::fuzz::write_file(dir / format::shard_file_name(s), shard.data(), shard.size());
  }

  try {
    const ShardSet set = ShardSet::open(dir, OpenOptions{.verify_checksums = false});
    volatile uint64_t sum = 0;
    for (int64_t i = 0; i < set.size(); ++i) {
      const SampleView view = set.sample(i);
      if (view.input_ids.size() != view.loss_mask.size()) __builtin_trap();
      for (const int32_t id : view.input_ids) sum += static_cast<uint32_t>(id);  // ASan: in bounds
      for (const uint8_t m : view.loss_mask) sum += m;
      try {
        set.verify_sample(i);
      } catch (const DataError&) {
      }
    }
  } catch (const DataError&) {
  }
  return 0;
}
