#pragma once
// On-disk layout of a prepared dataset directory (format version 1):
//
//   <dir>/index.bin         IndexHeader, ShardEntry[num_shards],
//                           int32 lengths[num_samples] (padded to 8 bytes),
//                           uint64 record_checksums[num_samples]
//   <dir>/shard-00000.bin   ShardHeader, then one record per sample:
//                           int32 input_ids[len], uint8 loss_mask[len],
//                           zero bytes up to a multiple of 4 (keeps ids aligned)
//
// A record's offset follows from the lengths, so the index stores no offsets
// that could disagree with them. Every byte of every file is covered by a
// checksum (header checksum, index body checksum, per-record checksum), so a
// flipped byte anywhere is refused at open. All integers are little-endian.
#include <cstdint>
#include <cstring>
#include <string>

namespace dflow::data::format {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kShardMagic[8] = {'D', 'F', 'L', 'S', 'H', 'R', 'D', '1'};
inline constexpr char kIndexMagic[8] = {'D', 'F', 'L', 'I', 'N', 'D', 'X', '1'};
inline constexpr const char* kIndexFileName = "index.bin";

struct ShardHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;      // sizeof(ShardHeader)
  uint64_t shard_number;      // the NNNNN of its file name
  uint64_t num_samples;
  uint64_t num_tokens;
  uint64_t file_bytes;        // header + all records
  uint64_t reserved;          // zero
  uint64_t header_checksum;   // xxhash64 of the bytes above
};
static_assert(sizeof(ShardHeader) == 64);

struct IndexHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;      // sizeof(IndexHeader)
  uint64_t num_shards;
  uint64_t num_samples;
  uint64_t num_tokens;
  int64_t vocab_size;         // checked at prepare; 0 = not checked
  int64_t max_token_id;       // largest id stored; -1 when there is no sample
  uint64_t body_bytes;        // everything after the header
  uint64_t body_checksum;     // xxhash64 of the body
  uint64_t header_checksum;   // xxhash64 of the bytes above
};
static_assert(sizeof(IndexHeader) == 80);

struct ShardEntry {
  uint64_t first_sample;      // global id (within this directory) of its first sample
  uint64_t num_samples;
  uint64_t num_tokens;
  uint64_t file_bytes;
};
static_assert(sizeof(ShardEntry) == 32);

// Bytes one sample of `length_tokens` occupies in a shard.
constexpr uint64_t record_bytes(uint64_t length_tokens) {
  return length_tokens * sizeof(int32_t) + ((length_tokens + 3) / 4) * 4;
}

constexpr uint64_t align8(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

// Body size of an index with these counts.
constexpr uint64_t index_body_bytes(uint64_t num_shards, uint64_t num_samples) {
  return num_shards * sizeof(ShardEntry) + align8(num_samples * sizeof(int32_t)) +
         num_samples * sizeof(uint64_t);
}

std::string shard_file_name(uint64_t shard_number);  // "shard-00042.bin"

inline bool magic_matches(const char (&magic)[8], const char (&expected)[8]) {
  return std::memcmp(magic, expected, 8) == 0;
}

}  // namespace dflow::data::format
