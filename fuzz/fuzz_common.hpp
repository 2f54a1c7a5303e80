#pragma once
// Shared by the libFuzzer targets of this folder. A target feeds one input to
// one reader of outside input. The errors a reader is documented to throw for
// bad input (ConfigError, DataError, ...) are the expected outcome and are
// caught by the target; anything else escapes and libFuzzer reports it as a
// crash, as it does for ASan/UBSan findings, leaks and timeouts.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace dflow::fuzz {

// A scratch directory of this process (readers that take a path get their
// input as a file in it). On /dev/shm when there is one: no disk writes.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto dir = base / ("dflow-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return dir;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace dflow::fuzz
