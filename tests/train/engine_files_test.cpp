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
  model::write_safetensors(path, {{"token_ids", torch::arange(5, torch::kInt64)},
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
