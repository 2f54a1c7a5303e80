// safetensors header validation, torch-free (see safetensors_header.hpp).
#include "formats/safetensors_header.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace dflow::formats {

namespace {

struct DtypeBytes {
  const char* name;
  size_t bytes;
};
constexpr DtypeBytes kDtypeBytes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

SafetensorsHeaderEntry parse_entry(const std::filesystem::path& path, const std::string& name,
                                   const nlohmann::json& value, uint64_t data_size_bytes) {
  auto entry_error = [&](const std::string& what) {
    return safetensors_file_error(path, "tensor '" + name + "': " + what);
  };
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets")) {
    throw entry_error("header entry must be an object with dtype, shape and data_offsets");
  }
  SafetensorsHeaderEntry entry;
  if (!value["dtype"].is_string()) throw entry_error("dtype is not a string");
  entry.dtype_name = value["dtype"].get<std::string>();
  entry.element_bytes = safetensors_dtype_bytes(entry.dtype_name);  // 0: not read, so kept unsized
  const auto& shape = value["shape"];
  const auto& offsets = value["data_offsets"];
  if (!shape.is_array()) throw entry_error("shape is not an array");
  for (const auto& dim : shape) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      throw entry_error("shape " + shape.dump() + " has a dimension that is not a non-negative integer");
    }
    entry.shape.push_back(dim.get<int64_t>());
  }
  // The element count and byte size must not wrap around 2^64: a shape such
  // as [2^62, 4] would otherwise "need" 0 bytes, pass the span check with
  // empty offsets, and make tensor() allocate (or map) 2^64 elements. The
  // bound is torch's: its strides are products of the dimensions (a 0 counted
  // as 1) and must fit in int64, so [2^62, 2^62, 0] is refused too.
  uint64_t numel = 1;
  uint64_t stride_bound = 1;
  for (const int64_t dim : entry.shape) {
    numel *= static_cast<uint64_t>(dim);  // cannot wrap: bounded by stride_bound
    if (__builtin_mul_overflow(stride_bound, static_cast<uint64_t>(std::max<int64_t>(dim, 1)), &stride_bound) ||
        stride_bound > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw entry_error("shape " + shape.dump() + " is too large: the product of its dimensions exceeds 2^63 - 1");
    }
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw entry_error("data_offsets must be two non-negative integers, got " + offsets.dump());
  }
  entry.data_begin_bytes = offsets[0].get<uint64_t>();
  entry.data_end_bytes = offsets[1].get<uint64_t>();
  if (entry.data_begin_bytes > entry.data_end_bytes || entry.data_end_bytes > data_size_bytes) {
    throw entry_error("data_offsets " + offsets.dump() + " fall outside the file's data section of " +
                      std::to_string(data_size_bytes) + " bytes (file truncated or header corrupt)");
  }
  if (entry.element_bytes == 0) return entry;
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(entry.element_bytes), &expected_bytes)) {
    throw entry_error("shape " + shape.dump() + " of dtype " + entry.dtype_name + " needs more than 2^64 bytes");
  }
  const uint64_t span_bytes = entry.data_end_bytes - entry.data_begin_bytes;
  if (span_bytes != expected_bytes) {
    throw entry_error("data_offsets " + offsets.dump() + " span " + std::to_string(span_bytes) +
                      " bytes but shape " + shape.dump() + " of dtype " + entry.dtype_name +
                      " needs " + std::to_string(expected_bytes) + " bytes");
  }
  return entry;
}

}  // namespace

const char* const kSafetensorsDtypeList = "F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL";

size_t safetensors_dtype_bytes(std::string_view dtype_name) {
  for (const auto& entry : kDtypeBytes) {
    if (dtype_name == entry.name) return entry.bytes;
  }
  return 0;
}

std::runtime_error safetensors_file_error(const std::filesystem::path& path, const std::string& what) {
  return std::runtime_error("safetensors file '" + path.string() + "': " + what);
}

std::runtime_error safetensors_dtype_error(const std::filesystem::path& path, const std::string& name,
                                           const std::string& dtype_name) {
  return safetensors_file_error(path, "tensor '" + name + "' is stored as " + dtype_name +
                                          ", a dtype dflow does not read (it reads " + kSafetensorsDtypeList + ")");
}

SafetensorsHeader parse_safetensors_header(const std::filesystem::path& path, const uint8_t* data,
                                           uint64_t file_size_bytes) {
  if (file_size_bytes < 8) {
    throw safetensors_file_error(path, "truncated: " + std::to_string(file_size_bytes) +
                                           " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_size_bytes = 0;
  std::memcpy(&header_size_bytes, data, 8);
  if (header_size_bytes > file_size_bytes - 8) {
    throw safetensors_file_error(path, "truncated: header length " + std::to_string(header_size_bytes) +
                                           " needs " + std::to_string(8 + header_size_bytes) +
                                           " bytes but the file has " + std::to_string(file_size_bytes));
  }
  SafetensorsHeader out;
  out.data_section_offset_bytes = 8 + header_size_bytes;
  const uint64_t data_size_bytes = file_size_bytes - out.data_section_offset_bytes;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(data) + 8,
                                   reinterpret_cast<const char*>(data) + 8 + header_size_bytes);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range 406 for a number like 1E400
    throw safetensors_file_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw safetensors_file_error(path, "header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw safetensors_file_error(path, "__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          throw safetensors_file_error(path, "__metadata__ value of '" + key + "' is not a string");
        }
        out.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    out.entries.emplace(name, parse_entry(path, name, value, data_size_bytes));
  }
  return out;
}

}  // namespace dflow::formats
