// A serving engine's hidden-state files and their lock: the connector holds
// an flock on <file>.lock while it writes and never deletes the lock file,
// so a file is held back while the lock is held, not while the lock file is
// there.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/data_error.hpp"
#include "formats/safetensors.hpp"
#include "train/engine_files.hpp"

namespace fs = std::filesystem;
using namespace dflow;

namespace {

// A whole file of sample 0 in `dir`, with a lock file beside it that nothing holds.
fs::path whole_file_with_lock_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dflow-engine-lock-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto path = train::engine_file_path(dir, 0);
  dflow::formats::write_safetensors(path, {{"token_ids", torch::arange(5, torch::kInt64)},
                                  {"hidden_states", torch::zeros({5, 2, 8})}});
  std::ofstream(path.string() + ".lock").put('\n');
  return path;
}

train::EngineWaitOptions short_wait() {
  train::EngineWaitOptions wait;
  wait.timeout = std::chrono::duration<double>(0.2);
  return wait;
}

}  // namespace

TEST_CASE("EngineFiles.a_lock_file_no_writer_holds_does_not_hold_the_file_back") {
  const auto path = whole_file_with_lock_file("released");
  CHECK_FALSE(train::engine_file_locked(path));
  CHECK(train::probe_engine_file(path) == train::EngineFileState::ready);
  CHECK(train::wait_for_engine_file(path.parent_path(), 0, short_wait()).count() < 0.2);
  CHECK(train::read_engine_file(path).token_ids.size() == 5);
}

TEST_CASE("EngineFiles.a_file_whose_lock_a_writer_holds_is_waited_for_until_the_lock_is_released") {
  const auto path = whole_file_with_lock_file("held");
  // The writer's lock, as the connector takes it (an exclusive flock).
  const int writer = ::open((path.string() + ".lock").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(writer >= 0);
  REQUIRE(::flock(writer, LOCK_EX | LOCK_NB) == 0);
  CHECK(train::engine_file_locked(path));
  CHECK(train::probe_engine_file(path) == train::EngineFileState::incomplete);
  CHECK_THROWS_WITH_AS(train::wait_for_engine_file(path.parent_path(), 0, short_wait()),
                       doctest::Contains("the writer still holds its .lock"), data::DataError);
  ::flock(writer, LOCK_UN);
  CHECK_FALSE(train::engine_file_locked(path));
  CHECK(train::probe_engine_file(path) == train::EngineFileState::ready);
  ::close(writer);
  // Probing took no lock that stays: the writer can lock it again at once.
  const int again = ::open((path.string() + ".lock").c_str(), O_RDWR | O_CLOEXEC);
  CHECK(::flock(again, LOCK_EX | LOCK_NB) == 0);
  ::close(again);
}

namespace {

// An engine file of 2 positions, 1 slot, hidden 4, FP8 as hs-connectors
// writes it unless `entries` (the header's JSON entries after token_ids)
// says otherwise; `data` the bytes after token_ids'.
fs::path fp8_file(const std::string& name, const std::string& entries, const std::string& data) {
  const fs::path dir = fs::temp_directory_path() / ("dflow-engine-fp8-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string header = R"({"token_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)" + entries + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t length = header.size();
  std::string bytes(reinterpret_cast<const char*>(&length), 8);
  bytes += header;
  const int64_t tokens[2] = {3, 4};
  bytes.append(reinterpret_cast<const char*>(tokens), 16);
  bytes += data;
  const auto path = train::engine_file_path(dir, 0);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

const std::string kFp8States = R"("hidden_states":{"dtype":"F8_E4M3","shape":[2,1,4],"data_offsets":[16,24]})";

std::string scales_bytes(float first, float second) {
  const float scales[2] = {first, second};
  return {reinterpret_cast<const char*>(scales), 8};
}

std::string read_error(const fs::path& path) {
  try {
    train::read_engine_file(path);
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("EngineFiles.an_fp8_file_is_read_with_its_per_token_scales") {
  const auto path = fp8_file("whole", kFp8States + R"(,"hidden_states_scales":{"dtype":"F32","shape":[2,1,1],"data_offsets":[24,32]})",
                             std::string(8, '\x38') + scales_bytes(0.5f, 2.0f));
  const auto sample = train::read_engine_file(path);
  CHECK(sample.dtype_name == "F8_E4M3");
  CHECK(sample.hidden_bytes.size() == 8);
  CHECK(sample.scales == std::vector<float>{0.5f, 2.0f});
}

TEST_CASE("EngineFiles.fp8_files_without_usable_scales_are_refused_naming_the_file_the_tensor_and_what_to_do") {
  auto e = read_error(fp8_file("no-scales", kFp8States, std::string(8, '\x38')));
  CHECK_MESSAGE(e.find("engine features file ") != std::string::npos, e);
  CHECK_MESSAGE(e.find("hs_0.safetensors: holds FP8 (F8_E4M3) hidden_states without hidden_states_scales") !=
                    std::string::npos,
                e);
  CHECK_MESSAGE(e.find("extract this sample again") != std::string::npos, e);
  e = read_error(fp8_file("scale-shape", kFp8States + R"(,"hidden_states_scales":{"dtype":"F32","shape":[2],"data_offsets":[24,32]})",
                          std::string(8, '\x38') + scales_bytes(1, 1)));
  CHECK_MESSAGE(e.find("hidden_states_scales must be float32 [2, 1, 1] (one scale per token") != std::string::npos, e);
  CHECK_MESSAGE(e.find("got F32 [2]") != std::string::npos, e);
  e = read_error(fp8_file("scale-zero", kFp8States + R"(,"hidden_states_scales":{"dtype":"F32","shape":[2,1,1],"data_offsets":[24,32]})",
                          std::string(8, '\x38') + scales_bytes(1, 0)));
  CHECK_MESSAGE(e.find("hidden_states_scales at position 1 is 0.000000, not a positive finite scale") != std::string::npos, e);
  // The header sizes no F8 span: the reader checks one byte a value.
  e = read_error(fp8_file("span", R"("hidden_states":{"dtype":"F8_E4M3","shape":[2,1,4],"data_offsets":[16,20]},)"
                                  R"("hidden_states_scales":{"dtype":"F32","shape":[2,1,1],"data_offsets":[20,28]})",
                          std::string(4, '\x38') + scales_bytes(1, 1)));
  CHECK_MESSAGE(e.find("hidden_states (F8_E4M3 [2, 1, 4]) spans 4 bytes, not one a value") != std::string::npos, e);
  e = read_error(fp8_file("bf16-scaled", R"("hidden_states":{"dtype":"BF16","shape":[2,1,4],"data_offsets":[16,32]},)"
                                         R"("hidden_states_scales":{"dtype":"F32","shape":[2,1,1],"data_offsets":[32,40]})",
                          std::string(16, '\0') + scales_bytes(1, 1)));
  CHECK_MESSAGE(e.find("holds hidden_states_scales beside BF16 hidden_states") != std::string::npos, e);
}
