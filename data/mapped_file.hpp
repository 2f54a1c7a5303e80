#pragma once
// A read-only memory mapping of a whole file. Moving it keeps the mapped
// address, so spans into it stay valid for the life of the owner.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace dflow::data {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(std::filesystem::path path);  // throws DataError naming the path
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const unsigned char> bytes() const { return {data_, size_bytes_}; }
  uint64_t size_bytes() const { return size_bytes_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const unsigned char* data_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace dflow::data
