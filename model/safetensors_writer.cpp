// safetensors writer: sorted header padded to 8 bytes, data in name order,
// written to a temporary file, synced and renamed into place.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "model/safetensors.hpp"
#include "model/safetensors_sharded.hpp"

namespace dflow::model {

namespace {

std::runtime_error write_error(const std::filesystem::path& path, const std::string& what) {
  return std::runtime_error("writing safetensors file '" + path.string() + "': " + what);
}

class OutputFile {
 public:
  OutputFile(const std::filesystem::path& path, const std::filesystem::path& reported_path)
      : path_(path), reported_path_(reported_path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw write_error(reported_path_, std::string("cannot create: ") + std::strerror(errno));
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write_all(const void* data, size_t size_bytes) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    while (size_bytes > 0) {
      const ssize_t written = ::write(fd_, bytes, size_bytes);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) throw write_error(reported_path_, std::string("write failed: ") + std::strerror(errno));
      bytes += written;
      size_bytes -= static_cast<size_t>(written);
    }
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) throw write_error(reported_path_, std::string("fsync failed: ") + std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw write_error(reported_path_, std::string("close failed: ") + std::strerror(errno));
  }

 private:
  std::filesystem::path path_;
  std::filesystem::path reported_path_;
  int fd_ = -1;
};

}  // namespace

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Name order gives a canonical file: the same tensors always give the same bytes.
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") throw write_error(path, "'__metadata__' is reserved and cannot name a tensor");
    if (!tensor.defined()) throw write_error(path, "tensor '" + name + "' is undefined");
    if (!by_name.emplace(name, tensor.detach().to(torch::kCPU).contiguous()).second) {
      throw write_error(path, "tensor name '" + name + "' appears twice");
    }
  }

  nlohmann::json header = nlohmann::json::object();  // std::map-backed: keys sorted
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset_bytes = 0;
  for (const auto& [name, tensor] : by_name) {
    const uint64_t size_bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", torch_dtype_to_safetensors(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset_bytes, offset_bytes + size_bytes}}};
    offset_bytes += size_bytes;
  }
  std::string header_text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (as the spec allows).
  header_text.append((8 - (8 + header_text.size()) % 8) % 8, ' ');
  const uint64_t header_size_bytes = header_text.size();

  std::filesystem::path temp_path = path;
  temp_path += ".tmp." + std::to_string(::getpid());
  try {
    OutputFile out(temp_path, path);
    out.write_all(&header_size_bytes, 8);
    out.write_all(header_text.data(), header_text.size());
    for (const auto& [name, tensor] : by_name) {
      out.write_all(tensor.data_ptr(), static_cast<size_t>(tensor.numel()) * tensor.element_size());
    }
    out.sync_and_close();
    std::filesystem::rename(temp_path, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temp_path, ignored);
    throw;
  }
}

void write_sharded_safetensors(const std::filesystem::path& dir,
                               const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                               int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0) throw write_error(dir, "max_shard_bytes must be positive");
  // Greedy in the given order, as Hugging Face's save_pretrained does: a
  // tensor that does not fit starts the next shard (one larger than the
  // limit has a shard of its own).
  std::vector<std::vector<size_t>> shards;
  int64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& tensor = tensors[i].second;
    if (!tensor.defined()) throw write_error(dir, "tensor '" + tensors[i].first + "' is undefined");
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<std::pair<std::string, torch::Tensor>> part;
    for (size_t i : shards[s]) {
      if (weight_map.contains(tensors[i].first)) throw write_error(dir, "tensor name '" + tensors[i].first + "' appears twice");
      weight_map[tensors[i].first] = name;
      part.push_back(tensors[i]);
    }
    write_safetensors(dir / name, part, {{"format", "pt"}});
  }
  // The index last: a reader that finds it finds every shard it names.
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  const auto index_path = dir / "model.safetensors.index.json";
  auto temp_path = index_path;
  temp_path += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp_path);
    out << index.dump(2) << "\n";
    if (!out) throw write_error(temp_path, "cannot write the shard index");
  }
  std::filesystem::rename(temp_path, index_path);
}

}  // namespace dflow::model
