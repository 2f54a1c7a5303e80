#pragma once
// A checkpoint's manifest.json, parsed and checked without LibTorch (so that
// it can be fuzzed on its own): the files it lists with their sizes and
// checksums. read_checkpoint (checkpoint.hpp) verifies the files against it.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dflow::train {

struct ManifestFile {
  std::string name;      // relative to the checkpoint directory, e.g. "drafter/model.safetensors"
  uint64_t bytes = 0;
  std::string xxhash64;  // hex digest, as checksum_hex writes it
};

struct CheckpointManifest {
  nlohmann::json json;   // the whole manifest (format_version, global_step, eval, ...)
  std::vector<ManifestFile> files;
};

// Parses the text of `manifest_path`; throws std::runtime_error naming the file.
CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::filesystem::path& manifest_path);

}  // namespace dflow::train
