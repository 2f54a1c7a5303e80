// safetensors reader: mmap the file, validate the whole header up front, and
// hand out tensors over the mapping (a dtype dflow does not read is refused
// when its tensor is asked for, not when the file is opened).
#include "formats/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/safetensors_header.hpp"

namespace dflow::formats {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; dflow maps the bytes as they are");

namespace {

struct DtypeName {
  const char* name;        // the header's
  torch::Dtype dtype;
  const char* torch_name;  // PyTorch's (torch.bfloat16), as configs write it
};
constexpr DtypeName kDtypeNames[] = {
    {"F64", torch::kFloat64, "float64"},   {"F32", torch::kFloat32, "float32"}, {"F16", torch::kFloat16, "float16"},
    {"BF16", torch::kBFloat16, "bfloat16"}, {"I64", torch::kInt64, "int64"},     {"I32", torch::kInt32, "int32"},
    {"I16", torch::kInt16, "int16"},       {"I8", torch::kInt8, "int8"},        {"U8", torch::kUInt8, "uint8"},
    {"BOOL", torch::kBool, "bool"},
};

std::runtime_error file_error(const std::filesystem::path& path, const std::string& what) {
  return safetensors_file_error(path, what);
}

}  // namespace

torch::Dtype safetensors_dtype_to_torch(const std::string& dtype_name) {
  for (const auto& entry : kDtypeNames) {
    if (dtype_name == entry.name) return entry.dtype;
  }
  throw std::runtime_error("unknown safetensors dtype '" + dtype_name + "' (supported: " +
                           kSafetensorsDtypeList + ")");
}

std::string safetensors_dtype_named(const std::string& torch_name) {
  for (const auto& entry : kDtypeNames) {
    if (torch_name == entry.torch_name) return entry.name;
  }
  throw std::runtime_error("dtype '" + torch_name + "' has no safetensors equivalent supported by dflow");
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

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_shared<FileMapping>(path)) {
  // The header is checked without torch (safetensors_header.cpp, fuzzed on its own).
  SafetensorsHeader header = parse_safetensors_header(path, mapping_->data(), mapping_->size_bytes());
  data_section_offset_bytes_ = header.data_section_offset_bytes;
  metadata_ = std::move(header.metadata);
  for (auto& [name, parsed] : header.entries) {
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype_name = std::move(parsed.dtype_name);
    entry.shape = std::move(parsed.shape);
    entry.data_begin_bytes = parsed.data_begin_bytes;
    entry.data_end_bytes = parsed.data_end_bytes;
    entries_.emplace(name, std::move(entry));
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

torch::Tensor SafetensorsFile::tensor(const std::string& name, bool with_float8) const {
  const SafetensorsEntry& info = entry(name);
  const bool float8 = with_float8 && (info.dtype_name == "F8_E4M3" || info.dtype_name == "F8_E5M2");
  const size_t element_bytes = float8 ? 1 : safetensors_dtype_bytes(info.dtype_name);
  if (element_bytes == 0) throw safetensors_dtype_error(path_, name, info.dtype_name);
  const auto options = torch::TensorOptions().dtype(
      !float8 ? safetensors_dtype_to_torch(info.dtype_name)
              : info.dtype_name == "F8_E4M3" ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2);
  uint8_t* bytes = mapping_->data() + data_section_offset_bytes_ + info.data_begin_bytes;
  const uint64_t size_bytes = info.data_end_bytes - info.data_begin_bytes;
  if (float8) {  // sized here: the header's check leaves out dtypes it does not read
    uint64_t elements = 1;
    for (const int64_t d : info.shape) elements *= static_cast<uint64_t>(d);
    if (elements != size_bytes)
      throw safetensors_file_error(path_, "tensor '" + name + "' (" + info.dtype_name + ", shape " +
                                              c10::str(c10::IntArrayRef(info.shape)) + ") spans " +
                                              std::to_string(size_bytes) + " bytes, not " + std::to_string(elements));
  }
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

TensorMap SafetensorsFile::all_tensors(bool with_float8) const {
  TensorMap result;
  for (const auto& [name, info] : entries_) result.emplace(name, tensor(name, with_float8));
  return result;
}

}  // namespace dflow::formats
