// Manifests that broke read_checkpoint (train/checkpoint_manifest.cpp, fuzzed
// by fuzz/fuzz_checkpoint_manifest.cpp), kept as tests of the fix.
// fuzz/RESULTS.md lists each finding.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace {

// A checkpoint directory holding only this manifest.json (and a file beside it).
struct ManifestDir {
  fs::path root = fs::temp_directory_path() / ("dflow-manifest-fuzz-" + std::to_string(::getpid()));
  fs::path dir = root / "step-1";
  explicit ManifestDir(const std::string& manifest) {
    fs::remove_all(root);
    fs::create_directories(dir);
    std::ofstream(dir / "manifest.json") << manifest;
    std::ofstream(root / "secret") << "not part of the checkpoint";
  }
  ~ManifestDir() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};

// The message of the std::runtime_error read_checkpoint throws; any other
// exception (nlohmann's own) escapes and fails the test.
std::string read_error(const std::string& manifest) {
  ManifestDir scratch(manifest);
  try {
    dflow::train::read_checkpoint(scratch.dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected a std::runtime_error for " << manifest);
  return {};
}

}  // namespace

TEST_CASE("Train.CheckpointFuzz.ManifestWithoutFilesOrWithBadEntriesIsRefusedNamingIt") {
  // fuzz_checkpoint_manifest: at("files"), at("xxhash64") and get<size_t>()
  // threw nlohmann exceptions naming neither the file nor the entry.
  auto message = read_error(R"({"format_version": 1, "global_step": 1})");
  CHECK_MESSAGE(message.find("step-1/manifest.json: no \"files\" object") != std::string::npos, message);
  message = read_error(R"({"files": {"state.json": {"bytes": 3}}})");
  CHECK_MESSAGE(message.find("manifest.json: files[\"state.json\"] has no non-negative integer \"bytes\" and string "
                             "\"xxhash64\"") != std::string::npos,
                message);
  message = read_error(R"({"files": {"state.json": {"bytes": -3, "xxhash64": "0"}}})");
  CHECK_MESSAGE(message.find("files[\"state.json\"] has no non-negative integer") != std::string::npos, message);
  message = read_error(R"({"files": []})");
  CHECK_MESSAGE(message.find("no \"files\" object") != std::string::npos, message);
}

TEST_CASE("Train.CheckpointFuzz.ManifestNamingAFileOutsideTheCheckpointIsRefused") {
  // fuzz_checkpoint_manifest's check that names stay inside the directory:
  // "../secret" or an absolute path made read_checkpoint read (and checksum)
  // any file.
  auto message = read_error(R"({"files": {"../secret": {"bytes": 26, "xxhash64": "0"}}})");
  CHECK_MESSAGE(message.find("files[\"../secret\"] is not a path inside the checkpoint directory") != std::string::npos,
                message);
  message = read_error(R"({"files": {"/etc/hostname": {"bytes": 1, "xxhash64": "0"}}})");
  CHECK_MESSAGE(message.find("files[\"/etc/hostname\"] is not a path inside") != std::string::npos, message);
}
