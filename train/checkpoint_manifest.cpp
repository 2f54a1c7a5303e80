// Checkpoint manifest parsing, torch-free (see checkpoint_manifest.hpp).
#include "train/checkpoint_manifest.hpp"

#include <stdexcept>

namespace dflow::train {

CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::filesystem::path& manifest_path) {
  CheckpointManifest manifest;
  try {
    manifest.json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("checkpoint: " + manifest_path.string() + " does not parse: " + e.what());
  }
  // Every shape is checked here, so that a damaged manifest is refused naming
  // the file (nlohmann's at()/get() would throw their own exceptions, which
  // name neither the file nor the key).
  auto refuse = [&](const std::string& what) {
    return std::runtime_error("checkpoint: " + manifest_path.string() + ": " + what +
                              "; a manifest lists each file with its \"bytes\" and \"xxhash64\"");
  };
  const auto& root = manifest.json;
  if (!root.is_object() || !root.contains("files") || !root["files"].is_object()) {
    throw refuse("no \"files\" object");
  }
  for (const auto& [file, info] : root["files"].items()) {
    const std::string where = "files[" + nlohmann::json(file).dump(-1, ' ', false,
                                                                   nlohmann::json::error_handler_t::replace) + "]";
    // The names are joined to the checkpoint directory: one that is absolute
    // or climbs out of it would make read_checkpoint read any file.
    const std::filesystem::path name(file);
    bool escapes = file.empty() || name.is_absolute();
    for (const auto& part : name) escapes = escapes || part == "..";
    if (escapes) throw refuse(where + " is not a path inside the checkpoint directory");
    if (!info.is_object() || !info.contains("bytes") || !info["bytes"].is_number_unsigned() ||
        !info.contains("xxhash64") || !info["xxhash64"].is_string()) {
      throw refuse(where + " has no non-negative integer \"bytes\" and string \"xxhash64\"");
    }
    manifest.files.push_back(ManifestFile{file, info["bytes"].get<uint64_t>(), info["xxhash64"].get<std::string>()});
  }
  return manifest;
}

}  // namespace dflow::train
