#include "data/shard_index.hpp"

#include <cstddef>
#include <cstring>
#include <fmt/format.h>
#include <numeric>

#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/mapped_file.hpp"
#include "data/output_file.hpp"

namespace dflow::data {
namespace {

constexpr const char* kRemedy = "re-run dflow prepare to rebuild the dataset";

[[noreturn]] void refuse(const std::filesystem::path& path, uint64_t offset_bytes, const std::string& what) {
  throw DataError(fmt::format("{}: at byte offset {}: {}; {}", path.string(), offset_bytes, what, kRemedy));
}

uint64_t header_checksum(const format::IndexHeader& header) {
  return xxhash64(&header, offsetof(format::IndexHeader, header_checksum));
}

void check_header(const std::filesystem::path& path, const format::IndexHeader& header, uint64_t file_bytes) {
  if (!format::magic_matches(header.magic, format::kIndexMagic)) {
    refuse(path, 0, "not a dflow index (bad magic)");
  }
  if (header.format_version != format::kFormatVersion) {
    refuse(path, offsetof(format::IndexHeader, format_version),
           fmt::format("format version {}, this build reads version {}", header.format_version,
                       format::kFormatVersion));
  }
  if (header.header_checksum != header_checksum(header)) {
    refuse(path, 0, fmt::format("header (bytes 0..{}) does not match its checksum", sizeof header));
  }
  if (header.header_bytes != sizeof header) {
    refuse(path, offsetof(format::IndexHeader, header_bytes),
           fmt::format("header size {} bytes, expected {}", header.header_bytes, sizeof header));
  }
  // Counts the file cannot hold are refused before any size is computed from
  // them: num_samples * 12 wraps around 2^64 for a large enough count and could
  // then pass the size check below.
  if (header.num_shards > file_bytes / sizeof(format::ShardEntry) ||
      header.num_samples > file_bytes / (sizeof(int32_t) + sizeof(uint64_t))) {
    refuse(path, offsetof(format::IndexHeader, num_shards),
           fmt::format("header says {} shards and {} samples, more than the file's {} bytes can hold",
                       header.num_shards, header.num_samples, file_bytes));
  }
  const uint64_t expected_body = format::index_body_bytes(header.num_shards, header.num_samples);
  if (header.body_bytes != expected_body) {
    refuse(path, offsetof(format::IndexHeader, body_bytes),
           fmt::format("body size {} bytes disagrees with {} shards and {} samples ({} bytes)",
                       header.body_bytes, header.num_shards, header.num_samples, expected_body));
  }
  const uint64_t expected_file = sizeof header + header.body_bytes;
  if (file_bytes < expected_file) {
    refuse(path, file_bytes,
           fmt::format("truncated: the file ends here but its header says {} bytes", expected_file));
  }
  if (file_bytes > expected_file) {
    refuse(path, expected_file,
           fmt::format("{} unexpected bytes after the end of the index", file_bytes - expected_file));
  }
}

template <typename T>
const unsigned char* copy_array(const unsigned char* p, std::vector<T>& out, uint64_t count) {
  out.resize(count);
  if (count != 0) std::memcpy(out.data(), p, count * sizeof(T));  // an empty vector's data() may be null
  return p + count * sizeof(T);
}

void check_consistency(const std::filesystem::path& path, const ShardIndex& index, const format::IndexHeader& header) {
  uint64_t next_sample = 0;
  for (size_t s = 0; s < index.shards.size(); ++s) {
    const auto& shard = index.shards[s];
    const uint64_t entry_offset = sizeof header + s * sizeof(format::ShardEntry);
    // (num_samples compared with what is left, not first_sample + num_samples: that sum can wrap)
    if (shard.first_sample != next_sample || shard.num_samples > index.lengths.size() - next_sample) {
      refuse(path, entry_offset, fmt::format("shard {} covers samples that do not follow the previous shard", s));
    }
    uint64_t tokens = 0;
    uint64_t record_bytes = 0;
    for (uint64_t i = shard.first_sample; i < shard.first_sample + shard.num_samples; ++i) {
      tokens += static_cast<uint64_t>(index.lengths[i]);
      record_bytes += format::record_bytes(static_cast<uint64_t>(index.lengths[i]));
    }
    if (tokens != shard.num_tokens || sizeof(format::ShardHeader) + record_bytes != shard.file_bytes) {
      refuse(path, entry_offset, fmt::format("shard {} token count or size disagrees with its sample lengths", s));
    }
    next_sample += shard.num_samples;
  }
  if (next_sample != index.lengths.size()) {
    refuse(path, sizeof header, fmt::format("shards cover {} samples, the header says {}", next_sample,
                                            index.lengths.size()));
  }
  const uint64_t lengths_offset = sizeof header + index.shards.size() * sizeof(format::ShardEntry);
  for (size_t i = 0; i < index.lengths.size(); ++i) {
    if (index.lengths[i] <= 0) {
      refuse(path, lengths_offset + i * sizeof(int32_t), fmt::format("sample {} has length {}", i, index.lengths[i]));
    }
  }
  if (static_cast<uint64_t>(index.num_tokens()) != header.num_tokens) {
    refuse(path, offsetof(format::IndexHeader, num_tokens), "token count disagrees with the sample lengths");
  }
}

}  // namespace

int64_t ShardIndex::num_tokens() const {
  return std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
}

void write_shard_index(const std::filesystem::path& path, const ShardIndex& index) {
  std::vector<unsigned char> body(format::index_body_bytes(index.shards.size(), index.lengths.size()), 0);
  unsigned char* p = body.data();
  // memcpy with a null pointer is undefined even for zero bytes, and an empty
  // dataset's vectors (and body) may have null data().
  auto put = [&p](const void* from, size_t bytes) {
    if (bytes != 0) std::memcpy(p, from, bytes);
  };
  put(index.shards.data(), index.shards.size() * sizeof(format::ShardEntry));
  p += index.shards.size() * sizeof(format::ShardEntry);
  put(index.lengths.data(), index.lengths.size() * sizeof(int32_t));
  p += format::align8(index.lengths.size() * sizeof(int32_t));
  put(index.record_checksums.data(), index.record_checksums.size() * sizeof(uint64_t));

  format::IndexHeader header{};
  std::memcpy(header.magic, format::kIndexMagic, sizeof header.magic);
  header.format_version = format::kFormatVersion;
  header.header_bytes = sizeof header;
  header.num_shards = index.shards.size();
  header.num_samples = index.lengths.size();
  header.num_tokens = static_cast<uint64_t>(index.num_tokens());
  header.vocab_size = index.vocab_size;
  header.max_token_id = index.max_token_id;
  header.body_bytes = body.size();
  header.body_checksum = xxhash64(body.data(), body.size());
  header.header_checksum = header_checksum(header);

  OutputFile file(path);
  file.write(&header, sizeof header);
  file.write(body.data(), body.size());
  file.close_synced();
}

ShardIndex read_shard_index(const std::filesystem::path& path) {
  const MappedFile file(path);
  const auto bytes = file.bytes();
  format::IndexHeader header{};
  if (bytes.size() < sizeof header) {
    refuse(path, bytes.size(), fmt::format("truncated: the file ends inside its {}-byte header", sizeof header));
  }
  std::memcpy(&header, bytes.data(), sizeof header);
  check_header(path, header, bytes.size());
  const unsigned char* body = bytes.data() + sizeof header;
  if (xxhash64(body, header.body_bytes) != header.body_checksum) {
    refuse(path, sizeof header,
           fmt::format("body (bytes {}..{}) does not match its checksum", sizeof header, bytes.size()));
  }
  ShardIndex index;
  index.vocab_size = header.vocab_size;
  index.max_token_id = header.max_token_id;
  const unsigned char* p = copy_array(body, index.shards, header.num_shards);
  copy_array(p, index.lengths, header.num_samples);
  p += format::align8(header.num_samples * sizeof(int32_t));
  copy_array(p, index.record_checksums, header.num_samples);
  check_consistency(path, index, header);
  return index;
}

}  // namespace dflow::data
