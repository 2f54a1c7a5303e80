#pragma once
// One prepared dataset directory, memory-mapped and verified at open.
// Read-only after open: sample() may be called from any number of threads.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "data/mapped_file.hpp"
#include "data/shard_index.hpp"

namespace dflow::data {

// Views into the mapped shard; valid while the ShardSet (or Dataset) lives.
struct SampleView {
  std::span<const int32_t> input_ids;
  std::span<const uint8_t> loss_mask;  // 1 on response tokens
};

struct OpenOptions {
  // Hash every record at open (about 10 GB/s on one core). Without it, open
  // checks headers and sizes only and verify_sample() checks on demand.
  bool verify_checksums = true;
};

class ShardSet {
 public:
  // Throws DataError naming the file and byte offset of anything corrupt,
  // truncated or of another format version.
  static ShardSet open(const std::filesystem::path& dir, const OpenOptions& options = {});

  int64_t size() const { return static_cast<int64_t>(index_.lengths.size()); }
  std::span<const int32_t> lengths() const { return index_.lengths; }
  SampleView sample(int64_t sample_id) const;
  // Recomputes one record's checksum; throws DataError naming file and offset.
  void verify_sample(int64_t sample_id) const;

  // Hash of the index (lengths and record checksums): equal fingerprints
  // mean the same samples in the same order.
  uint64_t fingerprint() const { return fingerprint_; }
  // The vocab size prepare checked ids against, when it was given one.
  std::optional<int64_t> vocab_size_hint() const;
  int64_t max_token_id() const { return index_.max_token_id; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct Location {
    uint32_t shard;
    uint64_t offset_bytes;  // of the record within its shard file
  };
  ShardSet() = default;
  void map_shards(const OpenOptions& options);
  void check_shard_header(size_t shard) const;

  std::filesystem::path dir_;
  ShardIndex index_;
  std::vector<MappedFile> shards_;
  std::vector<Location> locations_;  // one per sample
  uint64_t fingerprint_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace dflow::data
