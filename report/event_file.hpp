#pragma once
// TensorBoard's event file: a sequence of records, each
//   uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data
// (little-endian), the data one serialized Event. The first event names the
// format ("brain.Event:2"). Torch-free; one writer per file, not thread-safe.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "report/append_file.hpp"

namespace dflow::report {

// CRC32C (Castagnoli) of `data`, and TensorBoard's masked form of it
// (rotated right by 15 bits plus 0xa282ead8): a CRC of data that holds CRCs.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One framed record, as it is written to the file.
std::string frame_record(std::string_view data);

class EventFileWriter {
 public:
  // Creates `path` (truncating it) and writes the file_version event.
  explicit EventFileWriter(std::filesystem::path path, double wall_time);
  // Appends one serialized Event, so a reader sees it at once; whole or not
  // at all (report/append_file.hpp): throws naming the file and the reason.
  void write(const std::string& serialized_event);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  AppendFile out_;
};

}  // namespace dflow::report
