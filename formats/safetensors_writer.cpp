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

#include "formats/safetensors.hpp"
#include "formats/safetensors_sharded.hpp"

namespace dflow::formats {

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

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::filesystem::path dir, int64_t max_shard_bytes)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes) {
  if (max_shard_bytes_ <= 0) throw write_error(dir_, "max_shard_bytes must be positive");
}

namespace {
std::filesystem::path part_path(const std::filesystem::path& dir, size_t shard) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu.safetensors.part", shard + 1);
  return dir / name;
}
}  // namespace

void ShardedSafetensorsWriter::add(std::string name, torch::Tensor tensor) {
  if (!tensor.defined()) throw write_error(dir_, "tensor '" + name + "' is undefined");
  if (!names_.insert(name).second) throw write_error(dir_, "tensor name '" + name + "' appears twice");
  // Greedy in the given order, as Hugging Face's save_pretrained does: a
  // tensor that does not fit starts the next shard (one larger than the
  // limit has a shard of its own).
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  if (pending_bytes_ > 0 && pending_bytes_ + bytes > max_shard_bytes_) write_pending();
  pending_.emplace_back(std::move(name), std::move(tensor));
  pending_bytes_ += bytes;
  total_bytes_ += bytes;
}

void ShardedSafetensorsWriter::write_pending() {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : pending_) names.push_back(name);
  write_safetensors(part_path(dir_, shard_tensors_.size()), pending_, {{"format", "pt"}});
  shard_tensors_.push_back(std::move(names));
  pending_.clear();  // the shard's tensors go: at most one shard is held
  pending_bytes_ = 0;
}

void ShardedSafetensorsWriter::finish() {
  if (!pending_.empty()) write_pending();
  nlohmann::json weight_map = nlohmann::json::object();
  const size_t shards = shard_tensors_.size();
  for (size_t s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
    std::filesystem::rename(part_path(dir_, s), dir_ / name);
    for (const auto& tensor : shard_tensors_[s]) weight_map[tensor] = name;
  }
  // The index last: a reader that finds it finds every shard it names.
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes_}}}, {"weight_map", weight_map}};
  const auto index_path = dir_ / "model.safetensors.index.json";
  auto temp_path = index_path;
  temp_path += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp_path);
    out << index.dump(2) << "\n";
    if (!out) throw write_error(temp_path, "cannot write the shard index");
  }
  std::filesystem::rename(temp_path, index_path);
}

void write_sharded_safetensors(const std::filesystem::path& dir,
                               const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                               int64_t max_shard_bytes) {
  ShardedSafetensorsWriter writer(dir, max_shard_bytes);
  for (const auto& [name, tensor] : tensors) writer.add(name, tensor);
  writer.finish();
}

}  // namespace dflow::formats
