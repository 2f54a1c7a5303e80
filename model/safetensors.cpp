// safetensors reader: mmap the file, validate the whole header up front, and
// hand out tensors over the mapping.
#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace dflow::model {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; dflow maps the bytes as they are");

namespace {

struct DtypeName {
  const char* name;
  torch::Dtype dtype;
};
constexpr DtypeName kDtypeNames[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
    {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},  {"I32", torch::kInt32},
    {"I16", torch::kInt16},    {"I8", torch::kInt8},     {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
};

std::runtime_error file_error(const std::filesystem::path& path, const std::string& what) {
  return std::runtime_error("safetensors file '" + path.string() + "': " + what);
}

}  // namespace

torch::Dtype safetensors_dtype_to_torch(const std::string& dtype_name) {
  for (const auto& entry : kDtypeNames) {
    if (dtype_name == entry.name) return entry.dtype;
  }
  throw std::runtime_error("unknown safetensors dtype '" + dtype_name +
                           "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

std::string torch_dtype_to_safetensors(torch::Dtype dtype) {
  for (const auto& entry : kDtypeNames) {
    if (dtype == entry.dtype) return entry.name;
  }
  throw std::runtime_error(std::string("torch dtype ") + c10::toString(dtype) +
                           " has no safetensors equivalent supported by dflow");
}

class FileMapping {
 public:
  explicit FileMapping(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat file_stat {};
    if (::fstat(fd, &file_stat) != 0) {
      const int err = errno;
      ::close(fd);
      throw file_error(path, std::string("cannot stat: ") + std::strerror(err));
    }
    size_bytes_ = static_cast<uint64_t>(file_stat.st_size);
    if (size_bytes_ > 0) {
      // Private + writable: pages are copy-on-write, so tensors handed out
      // over the mapping may be modified without touching the file.
      void* addr = ::mmap(nullptr, size_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (addr == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw file_error(path, std::string("cannot mmap: ") + std::strerror(err));
      }
      data_ = static_cast<uint8_t*>(addr);
    }
    ::close(fd);  // the mapping stays valid after close
  }
  ~FileMapping() {
    if (data_ != nullptr) ::munmap(data_, size_bytes_);
  }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size_bytes() const { return size_bytes_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_bytes_ = 0;
};

namespace {

SafetensorsEntry parse_entry(const std::filesystem::path& path, const std::string& name,
                             const nlohmann::json& value, uint64_t data_size_bytes) {
  auto entry_error = [&](const std::string& what) {
    return file_error(path, "tensor '" + name + "': " + what);
  };
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets")) {
    throw entry_error("header entry must be an object with dtype, shape and data_offsets");
  }
  SafetensorsEntry entry;
  entry.name = name;
  if (!value["dtype"].is_string()) throw entry_error("dtype is not a string");
  entry.dtype_name = value["dtype"].get<std::string>();
  try {
    entry.dtype = safetensors_dtype_to_torch(entry.dtype_name);
  } catch (const std::runtime_error& e) {
    throw entry_error(e.what());
  }
  const auto& shape = value["shape"];
  const auto& offsets = value["data_offsets"];
  if (!shape.is_array()) throw entry_error("shape is not an array");
  uint64_t numel = 1;
  for (const auto& dim : shape) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      throw entry_error("shape " + shape.dump() + " has a dimension that is not a non-negative integer");
    }
    entry.shape.push_back(dim.get<int64_t>());
    numel *= dim.get<uint64_t>();
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
  const uint64_t expected_bytes = numel * c10::elementSize(entry.dtype);
  const uint64_t span_bytes = entry.data_end_bytes - entry.data_begin_bytes;
  if (span_bytes != expected_bytes) {
    throw entry_error("data_offsets " + offsets.dump() + " span " + std::to_string(span_bytes) +
                      " bytes but shape " + shape.dump() + " of dtype " + entry.dtype_name +
                      " needs " + std::to_string(expected_bytes) + " bytes");
  }
  return entry;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_shared<FileMapping>(path)) {
  const uint64_t file_size_bytes = mapping_->size_bytes();
  if (file_size_bytes < 8) {
    throw file_error(path, "truncated: " + std::to_string(file_size_bytes) +
                               " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_size_bytes = 0;
  std::memcpy(&header_size_bytes, mapping_->data(), 8);
  if (header_size_bytes > file_size_bytes - 8) {
    throw file_error(path, "truncated: header length " + std::to_string(header_size_bytes) +
                               " needs " + std::to_string(8 + header_size_bytes) +
                               " bytes but the file has " + std::to_string(file_size_bytes));
  }
  data_section_offset_bytes_ = 8 + header_size_bytes;
  const uint64_t data_size_bytes = file_size_bytes - data_section_offset_bytes_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(mapping_->data()) + 8,
                                   reinterpret_cast<const char*>(mapping_->data()) + 8 + header_size_bytes);
  } catch (const nlohmann::json::parse_error& e) {
    throw file_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw file_error(path, "header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw file_error(path, "__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) throw file_error(path, "__metadata__ value of '" + key + "' is not a string");
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    entries_.emplace(name, parse_entry(path, name, value, data_size_bytes));
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> result;
  result.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) result.push_back(name);
  return result;
}

bool SafetensorsFile::contains(const std::string& name) const { return entries_.count(name) != 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw file_error(path_, "has no tensor named '" + name + "'");
  return it->second;
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& info = entry(name);
  const auto options = torch::TensorOptions().dtype(info.dtype);
  uint8_t* bytes = mapping_->data() + data_section_offset_bytes_ + info.data_begin_bytes;
  const uint64_t size_bytes = info.data_end_bytes - info.data_begin_bytes;
  const auto element_bytes = c10::elementSize(info.dtype);
  if (size_bytes == 0) return torch::empty(info.shape, options);
  if (reinterpret_cast<uintptr_t>(bytes) % element_bytes != 0) {
    // Misaligned for its dtype (allowed by the format): copy into owned memory.
    torch::Tensor owned = torch::empty(info.shape, options);
    std::memcpy(owned.data_ptr(), bytes, size_bytes);
    return owned;
  }
  std::shared_ptr<FileMapping> keep_alive = mapping_;
  return torch::from_blob(bytes, info.shape, [keep_alive](void*) {}, options);
}

TensorMap SafetensorsFile::all_tensors() const {
  TensorMap result;
  for (const auto& [name, info] : entries_) result.emplace(name, tensor(name));
  return result;
}

}  // namespace dflow::model
