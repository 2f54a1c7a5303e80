#include "data/output_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "data/data_error.hpp"

namespace dflow::data {
namespace {
constexpr size_t kBufferBytes = size_t{1} << 20;
}

OutputFile::OutputFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create");
  buffer_.reserve(kBufferBytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* bytes, size_t size_bytes) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  if (buffer_.size() + size_bytes > kBufferBytes) flush();
  if (size_bytes >= kBufferBytes) {
    // Large writes bypass the buffer rather than being copied through it.
    size_t done = 0;
    while (done < size_bytes) {
      const ssize_t n = ::write(fd_, p + done, size_bytes - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      done += static_cast<size_t>(n);
    }
  } else {
    buffer_.insert(buffer_.end(), p, p + size_bytes);
  }
  size_bytes_ += size_bytes;
}

void OutputFile::write_at(uint64_t offset_bytes, const void* bytes, size_t size_bytes) {
  flush();
  const auto* p = static_cast<const unsigned char*>(bytes);
  size_t done = 0;
  while (done < size_bytes) {
    const ssize_t n = ::pwrite(fd_, p + done, size_bytes - done, static_cast<off_t>(offset_bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write");
    done += static_cast<size_t>(n);
  }
}

void OutputFile::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write");
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
}

void OutputFile::close_synced() {
  flush();
  if (::fsync(fd_) != 0) fail("cannot fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close");
}

void OutputFile::fail(const char* what) const {
  throw DataError(fmt::format("{}: {} ({}); check free space and permissions of the output directory",
                              path_.string(), what, std::strerror(errno)));
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError(fmt::format("{}: cannot open directory to sync it ({})", dir.string(), std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int saved_errno = errno;
  ::close(fd);
  if (rc != 0) {
    throw DataError(fmt::format("{}: cannot fsync directory ({})", dir.string(), std::strerror(saved_errno)));
  }
}

}  // namespace dflow::data
