#pragma once
// A buffered, append-mostly output file that reports every failure with its
// path and errno, and can be closed with fsync so that a later rename
// publishes complete bytes only.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace dflow::data {

class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path);  // creates or truncates
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // closes without syncing: an abandoned file

  void write(const void* bytes, size_t size_bytes);
  // Overwrites already written bytes (e.g. a header whose counts are known
  // only at the end).
  void write_at(uint64_t offset_bytes, const void* bytes, size_t size_bytes);
  uint64_t size_bytes() const { return size_bytes_; }
  const std::filesystem::path& path() const { return path_; }
  void close_synced();

 private:
  void flush();
  [[noreturn]] void fail(const char* what) const;

  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<unsigned char> buffer_;
  uint64_t size_bytes_ = 0;
};

// fsync of a directory, so that renames and new entries inside it are durable.
void sync_directory(const std::filesystem::path& dir);

}  // namespace dflow::data
