// SpecForge's offline capture files as containers (train/specforge_container.hpp).
#include "train/specforge_container.hpp"

#include <zlib.h>

#include <algorithm>
#include <fstream>

#include "data/data_error.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

namespace {

uint64_t little_endian(const char* at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(at[i]);
  return value;
}

constexpr uint64_t kEndRecordBytes = 22, kZip64LocatorBytes = 20, kZip64EndRecordBytes = 56;
constexpr uint64_t kZipTailBytes = kEndRecordBytes + kZip64LocatorBytes + kZip64EndRecordBytes;

// `tail` holds the last `tail_size` bytes (up to kZipTailBytes) of a file of `file_size` bytes.
bool zip_tail_is_whole(const char* tail, uint64_t tail_size, uint64_t file_size) {
  if (tail_size < kEndRecordBytes) return false;
  const char* end = tail + tail_size - kEndRecordBytes;
  // The end record, with no comment after it (torch.save writes none).
  if (little_endian(end, 4) != 0x06054b50 || little_endian(end + 20, 2) != 0) return false;
  const uint64_t directory_bytes = little_endian(end + 12, 4), directory_at = little_endian(end + 16, 4);
  if (directory_at != 0xffffffff && directory_at + directory_bytes == file_size - kEndRecordBytes) return true;
  // zip64: its end record and the locator of that record right before.
  if (tail_size < kZipTailBytes) return false;
  const char* locator = end - kZip64LocatorBytes;
  const uint64_t zip64_end_at = little_endian(locator + 8, 8);
  if (little_endian(locator, 4) != 0x07064b50 || zip64_end_at != file_size - kZipTailBytes) return false;
  const char* zip64_end = tail;
  if (little_endian(zip64_end, 4) != 0x06064b50) return false;
  const uint64_t directory64_bytes = little_endian(zip64_end + 40, 8), directory64_at = little_endian(zip64_end + 48, 8);
  return directory64_at <= zip64_end_at && directory64_bytes == zip64_end_at - directory64_at;
}

data::DataError container_error(const fs::path& path, const std::string& what) {
  return data::DataError("SpecForge capture file " + path.string() + ": " + what);
}

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

SpecForgeFilePaths specforge_file_paths(const fs::path& dir, int64_t sample_id, int64_t group_size) {
  const int64_t group = sample_id / group_size * group_size;
  const fs::path rows = dir / ("rows_" + std::to_string(group) + "-" + std::to_string(group + group_size));
  const std::string name = "data_" + std::to_string(sample_id) + ".ckpt";
  return {rows / name, rows / (name + ".gz")};
}

bool zip_archive_is_whole(const char* data, size_t size) {
  const uint64_t tail = std::min<uint64_t>(size, kZipTailBytes);
  return zip_tail_is_whole(data + size - tail, tail, size);
}

Inflated gunzip(const fs::path& path, const char* data, size_t size, uint64_t max_bytes) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) throw container_error(path, "zlib could not start inflating");
  constexpr size_t kChunkBytes = size_t{1} << 30;  // zlib counts in 32 bits
  Inflated out;
  size_t fed = 0, produced = 0;
  int status = Z_OK;
  for (;;) {
    if (stream.avail_in == 0 && fed < size) {
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data + fed));
      stream.avail_in = static_cast<uInt>(std::min(size - fed, kChunkBytes));
      fed += stream.avail_in;
    }
    if (produced == out.bytes.size()) {
      if (produced >= max_bytes) {
        inflateEnd(&stream);
        throw container_error(path, "inflates to more than " + std::to_string(max_bytes) +
                                        " bytes: not a capture file; remove it or capture this sample again");
      }
      out.bytes.resize(std::min<uint64_t>(max_bytes, std::max<uint64_t>(uint64_t{produced} * 2, 1 << 16)));
    }
    const size_t room = std::min(out.bytes.size() - produced, kChunkBytes);
    stream.next_out = reinterpret_cast<Bytef*>(out.bytes.data() + produced);
    stream.avail_out = static_cast<uInt>(room);
    status = inflate(&stream, Z_NO_FLUSH);
    produced += room - stream.avail_out;
    if (status == Z_BUF_ERROR && stream.avail_in == 0 && fed == size) break;  // the bytes ended first
    if (status != Z_OK && status != Z_BUF_ERROR) break;
  }
  out.bytes.resize(produced);
  const bool ended = status == Z_STREAM_END, trailing = stream.avail_in != 0 || fed != size;
  const std::string why = stream.msg ? stream.msg : "zlib status " + std::to_string(status);
  inflateEnd(&stream);
  if (ended && trailing)
    throw container_error(path, "holds bytes after its gzip stream's end: not what gzip.open writes; remove it or "
                                "capture this sample again");
  if (!ended && status != Z_BUF_ERROR)
    throw container_error(path, "is not a gzip stream (" + why +
                                    "): damaged, or a .ckpt.gz that is not gzip; remove it or capture this sample "
                                    "again");
  out.state = ended ? EngineFileState::ready : EngineFileState::incomplete;
  return out;
}

SpecForgeContainer read_specforge_container(const SpecForgeFilePaths& paths, uint64_t max_bytes) {
  SpecForgeContainer out;
  std::error_code ec;
  const bool plain = fs::exists(paths.plain, ec);
  if (!plain && !fs::exists(paths.gzipped, ec)) return out;
  out.path = plain ? paths.plain : paths.gzipped;
  out.state = EngineFileState::incomplete;
  if (plain) {
    // The end alone first: a file still being written is not read whole on every poll.
    const auto size_bytes = fs::file_size(out.path, ec);
    if (ec) return out;
    std::ifstream in(out.path, std::ios::binary);
    const uint64_t tail_bytes = std::min<uint64_t>(size_bytes, kZipTailBytes);
    std::vector<char> tail(tail_bytes);
    in.seekg(static_cast<std::streamoff>(size_bytes - tail_bytes));
    in.read(tail.data(), static_cast<std::streamsize>(tail_bytes));
    if (!in || !zip_tail_is_whole(tail.data(), tail_bytes, size_bytes)) return out;
    out.archive = read_all(out.path);
    if (out.archive.size() != size_bytes) throw container_error(out.path, "changed size while it was read");
    out.state = EngineFileState::ready;
    return out;
  }
  const auto compressed = read_all(out.path);
  auto inflated = gunzip(out.path, compressed.data(), compressed.size(), max_bytes);
  if (inflated.state != EngineFileState::ready) return out;
  if (!zip_archive_is_whole(inflated.bytes.data(), inflated.bytes.size()))
    throw container_error(out.path, "its gzip stream is whole but holds no whole torch.save archive (" +
                                        std::to_string(inflated.bytes.size()) +
                                        " bytes without a zip end record): remove it or capture this sample again");
  out.archive = std::move(inflated.bytes);
  out.state = EngineFileState::ready;
  return out;
}

}  // namespace dflow::train
