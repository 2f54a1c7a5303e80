#include "report/event_file.hpp"

#include <isa-l/crc.h>

#include <algorithm>

#include "tensorboard_event.pb.h"

namespace dflow::report {

uint32_t crc32c(std::string_view data) {
  // ISA-L's iSCSI CRC is CRC32C without the initial and final inversion.
  uint32_t crc = 0xFFFFFFFFu;
  // ISA-L takes a non-const pointer but only reads through it.
  auto* bytes = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  size_t left = data.size();
  while (left > 0) {  // its length is an int
    const int chunk = static_cast<int>(std::min<size_t>(left, 1u << 30));
    crc = crc32_iscsi(bytes, chunk, crc);
    bytes += chunk;
    left -= static_cast<size_t>(chunk);
  }
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace {
template <class T>
void put_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}
}  // namespace

std::string frame_record(std::string_view data) {
  std::string length;
  put_le<uint64_t>(length, data.size());
  std::string record = length;
  put_le<uint32_t>(record, masked_crc32c(length));
  record.append(data);
  put_le<uint32_t>(record, masked_crc32c(data));
  return record;
}

EventFileWriter::EventFileWriter(std::filesystem::path path, double wall_time)
    : path_(std::move(path)), out_(path_, AppendFile::Mode::truncate) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version("brain.Event:2");
  write(event.SerializeAsString());
}

void EventFileWriter::write(const std::string& serialized_event) {
  out_.append(frame_record(serialized_event));
}

}  // namespace dflow::report
