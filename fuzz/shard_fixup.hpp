#pragma once
// Checksum repair for the shard fuzz targets: every byte of a prepared
// dataset is covered by an xxhash64, so nearly every mutation would stop at
// the first checksum. These recompute the header and body checksums of a
// mutated index.bin or shard header, so the fuzzer also reaches the checks
// behind them (sizes, counts, offsets).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "data/checksum.hpp"
#include "data/shard_format.hpp"

namespace dflow::fuzz {

inline void fix_index_checksums(std::vector<unsigned char>& bytes) {
  using data::format::IndexHeader;
  if (bytes.size() < sizeof(IndexHeader)) return;
  IndexHeader header;
  std::memcpy(&header, bytes.data(), sizeof header);
  const size_t body = std::min<uint64_t>(header.body_bytes, bytes.size() - sizeof header);
  header.body_checksum = data::xxhash64(bytes.data() + sizeof header, body);
  header.header_checksum = data::xxhash64(&header, offsetof(IndexHeader, header_checksum));
  std::memcpy(bytes.data(), &header, sizeof header);
}

inline void fix_shard_checksum(std::vector<unsigned char>& bytes) {
  using data::format::ShardHeader;
  if (bytes.size() < sizeof(ShardHeader)) return;
  ShardHeader header;
  std::memcpy(&header, bytes.data(), sizeof header);
  header.header_checksum = data::xxhash64(&header, offsetof(ShardHeader, header_checksum));
  std::memcpy(bytes.data(), &header, sizeof header);
}

}  // namespace dflow::fuzz
