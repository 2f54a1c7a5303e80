// Reading a few named tensors of a Hugging Face checkpoint directory without
// mapping or reading the rest: each file's header is read with pread and
// checked as SafetensorsFile checks it, then only the wanted tensors' bytes.
// The others are skipped whatever their dtype, so a head read from an FP8 or
// INT4-packed checkpoint needs only the head to be stored in a dtype dflow reads.
// A run that needs only the target's embedding and LM head then holds those
// (about 1.2 GB for an 8B target) rather than touching 16 GB.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include "formats/safetensors.hpp"
#include "formats/safetensors_header.hpp"

namespace dflow::formats {

namespace {

namespace fs = std::filesystem;

std::runtime_error dir_error(const fs::path& dir, const std::string& what) {
  return std::runtime_error("checkpoint directory '" + dir.string() + "': " + what);
}

class OpenFile {
 public:
  explicit OpenFile(const fs::path& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw safetensors_file_error(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat file_stat {};
    if (::fstat(fd_, &file_stat) != 0) {
      const int err = errno;
      ::close(fd_);
      throw safetensors_file_error(path, std::string("cannot stat: ") + std::strerror(err));
    }
    size_bytes_ = static_cast<uint64_t>(file_stat.st_size);
  }
  ~OpenFile() { ::close(fd_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  uint64_t size_bytes() const { return size_bytes_; }

  void read_exactly(void* out, uint64_t size_bytes, uint64_t offset_bytes) const {
    auto* bytes = static_cast<char*>(out);
    while (size_bytes > 0) {
      const ssize_t got = ::pread(fd_, bytes, size_bytes, static_cast<off_t>(offset_bytes));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw safetensors_file_error(path_, "read failed at byte " + std::to_string(offset_bytes) + ": " +
                                                (got == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
      bytes += got, size_bytes -= static_cast<uint64_t>(got), offset_bytes += static_cast<uint64_t>(got);
    }
  }

 private:
  fs::path path_;
  int fd_;
  uint64_t size_bytes_ = 0;
};

// The header alone: its 8-byte length, then that many bytes (bounded by the
// file size before anything is allocated), checked by the shared parser.
SafetensorsHeader read_header(const fs::path& path, const OpenFile& file) {
  uint64_t header_size_bytes = 0;
  if (file.size_bytes() >= 8) file.read_exactly(&header_size_bytes, 8, 0);
  std::vector<uint8_t> head(8);
  if (file.size_bytes() >= 8 && header_size_bytes <= file.size_bytes() - 8) {
    head.resize(8 + header_size_bytes);
    file.read_exactly(head.data(), head.size(), 0);
  } else if (file.size_bytes() >= 8) {
    std::memcpy(head.data(), &header_size_bytes, 8);  // the parser names the truncation
  }
  // The parser reads the header bytes only; the file size bounds the offsets.
  return parse_safetensors_header(path, head.data(), file.size_bytes());
}

// Reads `wanted` tensors of one file that holds them into `out`.
void read_from_file(const fs::path& path, const std::set<std::string>& wanted, TensorMap& out) {
  const OpenFile file(path);
  const SafetensorsHeader header = read_header(path, file);
  for (const auto& name : wanted) {
    const auto it = header.entries.find(name);
    if (it == header.entries.end()) continue;
    const auto& entry = it->second;
    if (entry.element_bytes == 0) throw safetensors_dtype_error(path, name, entry.dtype_name);
    torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(safetensors_dtype_to_torch(entry.dtype_name)));
    file.read_exactly(tensor.data_ptr(), entry.data_end_bytes - entry.data_begin_bytes,
                      header.data_section_offset_bytes + entry.data_begin_bytes);
    out.emplace(name, std::move(tensor));
  }
}

// Shard file name -> the wanted names the index puts there.
std::map<std::string, std::set<std::string>> shards_of(const fs::path& dir, const fs::path& index_path,
                                                       const std::set<std::string>& wanted) {
  const auto weight_map = read_checkpoint_index(dir, index_path);
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& name : wanted)
    if (const auto it = weight_map.find(name); it != weight_map.end()) shards[it->second].insert(name);
  return shards;
}

}  // namespace

TensorMap read_checkpoint_tensors(const fs::path& dir, const std::vector<std::string>& names) {
  if (!fs::is_directory(dir)) throw dir_error(dir, "is not a directory");
  const std::set<std::string> wanted(names.begin(), names.end());
  TensorMap result;
  const auto index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    for (const auto& [shard, in_shard] : shards_of(dir, index_path, wanted)) {
      read_from_file(dir / shard, in_shard, result);
      for (const auto& name : in_shard)
        if (!result.count(name))
          throw dir_error(dir, "index puts tensor '" + name + "' in shard '" + shard + "' but that shard does not hold it");
    }
    return result;
  }
  if (fs::exists(dir / "model.safetensors")) {
    read_from_file(dir / "model.safetensors", wanted, result);
    return result;
  }
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(dir))
    if (item.is_regular_file() && item.path().extension() == ".safetensors") files.push_back(item.path());
  if (files.empty()) throw dir_error(dir, "holds no *.safetensors file (expected model.safetensors or an index)");
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    TensorMap found;
    read_from_file(file, wanted, found);
    for (auto& [name, tensor] : found)
      if (!result.emplace(name, tensor).second)
        throw dir_error(dir, "tensor '" + name + "' appears in more than one file (second: " + file.filename().string() + ")");
  }
  return result;
}

}  // namespace dflow::formats
