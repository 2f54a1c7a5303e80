#pragma once
// index.bin of a prepared dataset directory, in memory: what the writer
// produces and the reader verifies (layout in shard_format.hpp).
#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/shard_format.hpp"

namespace dflow::data {

struct ShardIndex {
  int64_t vocab_size = 0;     // checked at prepare; 0 = not checked
  int64_t max_token_id = -1;  // largest id stored; -1 when there is no sample
  std::vector<format::ShardEntry> shards;
  std::vector<int32_t> lengths;             // tokens per sample, in sample order
  std::vector<uint64_t> record_checksums;   // xxhash64 of each sample's shard record

  int64_t num_samples() const { return static_cast<int64_t>(lengths.size()); }
  int64_t num_tokens() const;
};

// Writes and fsyncs `path`.
void write_shard_index(const std::filesystem::path& path, const ShardIndex& index);

// Reads and verifies magic, version, checksums and internal consistency.
// Throws DataError naming the file and the byte offset of what is wrong.
ShardIndex read_shard_index(const std::filesystem::path& path);

}  // namespace dflow::data
