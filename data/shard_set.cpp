#include "data/shard_set.hpp"

#include <cstddef>
#include <cstring>
#include <fmt/format.h>

#include "data/checksum.hpp"
#include "data/data_error.hpp"

namespace dflow::data {
namespace {

constexpr const char* kRemedy = "re-run dflow prepare to rebuild the dataset";

[[noreturn]] void refuse(const std::filesystem::path& path, uint64_t offset_bytes, const std::string& what) {
  throw DataError(fmt::format("{}: at byte offset {}: {}; {}", path.string(), offset_bytes, what, kRemedy));
}

uint64_t index_fingerprint(const ShardIndex& index) {
  uint64_t h = hash_combine(0x64666c6f77ULL /* "dflow" */, static_cast<uint64_t>(index.num_samples()));
  h = xxhash64(std::span<const int32_t>(index.lengths), h);
  return xxhash64(std::span<const uint64_t>(index.record_checksums), h);
}

}  // namespace

ShardSet ShardSet::open(const std::filesystem::path& dir, const OpenOptions& options) {
  if (!std::filesystem::is_directory(dir)) {
    throw DataError(fmt::format("{}: not a directory; point data.train at the output of dflow prepare", dir.string()));
  }
  ShardSet set;
  set.dir_ = dir;
  set.index_ = read_shard_index(dir / format::kIndexFileName);
  set.num_tokens_ = set.index_.num_tokens();
  set.fingerprint_ = index_fingerprint(set.index_);
  set.map_shards(options);
  return set;
}

void ShardSet::map_shards(const OpenOptions& options) {
  locations_.resize(index_.lengths.size());
  for (size_t s = 0; s < index_.shards.size(); ++s) {
    const auto& entry = index_.shards[s];
    shards_.emplace_back(dir_ / format::shard_file_name(s));
    const auto& file = shards_.back();
    if (file.size_bytes() < entry.file_bytes) {
      refuse(file.path(), file.size_bytes(),
             fmt::format("truncated: the file ends here but index.bin says it has {} bytes", entry.file_bytes));
    }
    if (file.size_bytes() > entry.file_bytes) {
      refuse(file.path(), entry.file_bytes,
             fmt::format("{} unexpected bytes after the last record", file.size_bytes() - entry.file_bytes));
    }
    check_shard_header(s);
    uint64_t offset_bytes = sizeof(format::ShardHeader);
    for (uint64_t i = entry.first_sample; i < entry.first_sample + entry.num_samples; ++i) {
      locations_[i] = Location{static_cast<uint32_t>(s), offset_bytes};
      offset_bytes += format::record_bytes(static_cast<uint64_t>(index_.lengths[i]));
    }
  }
  if (options.verify_checksums) {
    for (int64_t i = 0; i < size(); ++i) verify_sample(i);
  }
}

void ShardSet::check_shard_header(size_t shard) const {
  const auto& file = shards_[shard];
  const auto& entry = index_.shards[shard];
  format::ShardHeader header{};
  std::memcpy(&header, file.bytes().data(), sizeof header);  // size checked against the index first
  if (!format::magic_matches(header.magic, format::kShardMagic)) {
    refuse(file.path(), 0, "not a dflow shard (bad magic)");
  }
  if (header.format_version != format::kFormatVersion) {
    refuse(file.path(), offsetof(format::ShardHeader, format_version),
           fmt::format("format version {}, this build reads version {}", header.format_version,
                       format::kFormatVersion));
  }
  if (header.header_checksum != xxhash64(&header, offsetof(format::ShardHeader, header_checksum))) {
    refuse(file.path(), 0, fmt::format("header (bytes 0..{}) does not match its checksum", sizeof header));
  }
  if (header.header_bytes != sizeof header || header.shard_number != shard ||
      header.num_samples != entry.num_samples || header.num_tokens != entry.num_tokens ||
      header.file_bytes != entry.file_bytes) {
    refuse(file.path(), 0, "header disagrees with index.bin (a shard from another dataset?)");
  }
}

SampleView ShardSet::sample(int64_t sample_id) const {
  if (sample_id < 0 || sample_id >= size()) {
    throw DataError(fmt::format("{}: sample {} does not exist (the directory holds {} samples)", dir_.string(),
                                sample_id, size()));
  }
  const Location where = locations_[static_cast<size_t>(sample_id)];
  const auto length = static_cast<size_t>(index_.lengths[static_cast<size_t>(sample_id)]);
  const unsigned char* record = shards_[where.shard].bytes().data() + where.offset_bytes;
  // Records start 4-byte aligned in a page-aligned mapping (see record_bytes).
  return SampleView{{reinterpret_cast<const int32_t*>(record), length},
                    {reinterpret_cast<const uint8_t*>(record + length * sizeof(int32_t)), length}};
}

void ShardSet::verify_sample(int64_t sample_id) const {
  const SampleView view = sample(sample_id);
  const Location where = locations_[static_cast<size_t>(sample_id)];
  const uint64_t length = view.input_ids.size();
  const uint64_t record_bytes = format::record_bytes(length);
  const unsigned char* record = shards_[where.shard].bytes().data() + where.offset_bytes;
  if (xxhash64(record, record_bytes) != index_.record_checksums[static_cast<size_t>(sample_id)]) {
    const auto& shard = index_.shards[where.shard];
    refuse(shards_[where.shard].path(), where.offset_bytes,
           fmt::format("sample {} (record {} of this shard, bytes {}..{}) does not match its checksum in index.bin",
                       sample_id, static_cast<uint64_t>(sample_id) - shard.first_sample, where.offset_bytes,
                       where.offset_bytes + record_bytes));
  }
}

std::optional<int64_t> ShardSet::vocab_size_hint() const {
  if (index_.vocab_size > 0) return index_.vocab_size;
  return std::nullopt;
}

}  // namespace dflow::data
