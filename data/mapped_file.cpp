#include "data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <utility>

#include "data/data_error.hpp"

namespace dflow::data {

MappedFile::MappedFile(std::filesystem::path path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError(fmt::format("{}: cannot open ({}); is the dataset directory complete? re-run dflow prepare",
                                path_.string(), std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved_errno = errno;
    ::close(fd);
    throw DataError(fmt::format("{}: cannot stat ({})", path_.string(), std::strerror(saved_errno)));
  }
  size_bytes_ = static_cast<size_t>(info.st_size);
  if (size_bytes_ > 0) {
    void* mapped = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int saved_errno = errno;
      ::close(fd);
      throw DataError(fmt::format("{}: cannot mmap {} bytes ({})", path_.string(), size_bytes_,
                                  std::strerror(saved_errno)));
    }
    data_ = static_cast<const unsigned char*>(mapped);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace dflow::data
