// index.bin of a prepared dataset (data/shard_index.cpp read_shard_index):
// the input is the file, read as it is and again with its checksums repaired
// (shard_fixup.hpp). Only DataError may come out; an index that is accepted
// must be consistent.
#include <cstdlib>
#include <vector>

#include "data/data_error.hpp"
#include "data/shard_index.hpp"
#include "fuzz/fuzz_common.hpp"
#include "fuzz/shard_fixup.hpp"

namespace {

void read(const std::vector<unsigned char>& bytes) {
  using namespace dflow::data;
  const auto path = dflow::fuzz::scratch_dir() / "index.bin";
  dflow::fuzz::write_file(path, bytes.data(), bytes.size());
  try {
    const ShardIndex index = read_shard_index(path);
    if (index.record_checksums.size() != index.lengths.size()) std::abort();
    uint64_t covered = 0;
    for (const auto& shard : index.shards) covered += shard.num_samples;
    if (covered != index.lengths.size()) std::abort();
    for (const int32_t length : index.lengths) {
      if (length <= 0) std::abort();
    }
  } catch (const DataError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  read(bytes);
  dflow::fuzz::fix_index_checksums(bytes);
  read(bytes);
  return 0;
}
