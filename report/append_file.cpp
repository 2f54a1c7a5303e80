#include "report/append_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dflow::report {

AppendFile::AppendFile(std::filesystem::path path, Mode mode) : path_(std::move(path)) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (mode == Mode::truncate ? O_TRUNC : 0);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot write " + path_.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      // Half a record would glue itself to the next one: cut back to the last whole record.
      // (A device such as /dev/full cannot be cut; nothing reached it anyway.)
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      }
      throw std::runtime_error("cannot write " + path_.string() + ": " + std::strerror(error));
    }
    done += static_cast<size_t>(n);
  }
  size_ += bytes.size();
}

}  // namespace dflow::report
