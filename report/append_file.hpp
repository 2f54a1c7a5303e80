#pragma once
// A file that records are appended to whole or not at all, for the metrics
// sinks (metrics.jsonl, TensorBoard's event file). A write that fails (a full
// disk) is cut back to the end of the last whole record and throws naming the
// file and the reason, so the file stays readable and a later write, once
// there is room, continues it cleanly. Torch-free; not thread-safe.
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace dflow::report {

class AppendFile {
 public:
  enum class Mode { truncate, append };
  // Opens (creating) `path`; throws std::runtime_error naming it.
  AppendFile(std::filesystem::path path, Mode mode);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Writes all of `bytes`, or nothing: throws "cannot write PATH: REASON".
  void append(std::string_view bytes);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole records
};

}  // namespace dflow::report
