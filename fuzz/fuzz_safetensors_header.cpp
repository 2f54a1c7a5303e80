// safetensors headers (formats/safetensors_header.cpp, the torch-free part of
// SafetensorsFile): the input is the whole file. Only std::runtime_error may
// come out; every accepted entry must lie inside the data section and (in a
// dtype dflow reads) span exactly shape * dtype bytes, which is what
// SafetensorsFile::tensor relies on when it hands out a tensor over the mapped
// bytes (touched here, so ASan sees any read outside the input), and the
// shape must be one torch accepts.
#include <cstdlib>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "formats/safetensors_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::formats;
  // A heap copy of exactly `size` bytes: reads past the end are ASan reports.
  std::vector<uint8_t> file(data, data + size);
  SafetensorsHeader header;
  try {
    header = parse_safetensors_header("fuzz.safetensors", file.data(), file.size());
  } catch (const std::runtime_error&) {
    return 0;
  }
  if (header.data_section_offset_bytes > size) std::abort();
  const uint64_t data_size = size - header.data_section_offset_bytes;
  volatile uint8_t sink = 0;
  for (const auto& [name, entry] : header.entries) {
    if (entry.data_begin_bytes > entry.data_end_bytes || entry.data_end_bytes > data_size) std::abort();
    // The element count the shape says, and torch's bound on a shape (its
    // strides, products of the dimensions with 0 counted as 1, fit in int64):
    // a header that passes must give a tensor torch can make.
    unsigned __int128 numel = 1, strides = 1;
    for (const int64_t dim : entry.shape) {
      if (dim < 0) std::abort();
      numel *= static_cast<uint64_t>(dim);
      strides *= static_cast<uint64_t>(dim > 0 ? dim : 1);
      if (strides > static_cast<unsigned __int128>(INT64_MAX)) std::abort();
    }
    // A dtype dflow does not read (element_bytes 0) is never sized, only skipped.
    if (entry.element_bytes != 0 && numel * entry.element_bytes != entry.data_end_bytes - entry.data_begin_bytes)
      std::abort();
    const uint8_t* bytes = file.data() + header.data_section_offset_bytes + entry.data_begin_bytes;
    for (uint64_t i = 0; i < entry.data_end_bytes - entry.data_begin_bytes; ++i) sink = sink ^ bytes[i];
  }
  return 0;
}
