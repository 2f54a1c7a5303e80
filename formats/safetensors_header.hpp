#pragma once
// The header of a safetensors file, parsed and checked without LibTorch (so
// that it can be fuzzed on its own): the 8-byte length, the JSON header and
// each entry's dtype, shape and offsets against the file size and
// shape * dtype size. SafetensorsFile (safetensors.hpp) maps the bytes.
//
// An entry in a dtype dflow does not read (F8_E4M3, F8_E5M2, a packed INT4
// layout's companions...) is kept, its shape and offsets checked but not its
// span (dflow does not know its element size): a reader that needs only some
// tensors of a checkpoint (a target's head) skips it, and reading it is
// refused (safetensors_dtype_error).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::formats {

// Bytes of one element of a safetensors dtype ("F32" -> 4, "BOOL" -> 1),
// or 0 for a dtype dflow does not read.
size_t safetensors_dtype_bytes(std::string_view dtype_name);
// The dtypes dflow reads, for messages: "F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL".
extern const char* const kSafetensorsDtypeList;

struct SafetensorsHeaderEntry {
  std::string dtype_name;         // as written in the header, e.g. "BF16"
  size_t element_bytes = 0;       // 0: a dtype dflow does not read
  std::vector<int64_t> shape;
  uint64_t data_begin_bytes = 0;  // relative to the data section
  uint64_t data_end_bytes = 0;
};

struct SafetensorsHeader {
  uint64_t data_section_offset_bytes = 0;  // 8 + header length
  std::map<std::string, SafetensorsHeaderEntry> entries;
  std::map<std::string, std::string> metadata;
};

// "safetensors file '<path>': <what>"
std::runtime_error safetensors_file_error(const std::filesystem::path& path, const std::string& what);

// "safetensors file '<path>': tensor '<name>' is stored as <dtype>, a dtype
// dflow does not read (...)": for a tensor that is needed but unreadable.
std::runtime_error safetensors_dtype_error(const std::filesystem::path& path, const std::string& name,
                                           const std::string& dtype_name);

// Parses and checks the header of the file `path` whose bytes are
// [data, data + size_bytes). Throws std::runtime_error naming the file (and
// the tensor) for anything malformed, truncated or inconsistent.
SafetensorsHeader parse_safetensors_header(const std::filesystem::path& path, const uint8_t* data,
                                           uint64_t size_bytes);

}  // namespace dflow::formats
