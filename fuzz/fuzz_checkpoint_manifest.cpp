// Checkpoint manifests (train/checkpoint_manifest.cpp, the torch-free part of
// read_checkpoint): the input is manifest.json. Only std::runtime_error may
// come out (a nlohmann::json exception would reach the user without the
// file's name); every listed file must stay inside the checkpoint directory.
#include <cstdlib>

#include "fuzz/fuzz_common.hpp"
#include "train/checkpoint_manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::train;
  CheckpointManifest manifest;
  try {
    manifest = parse_checkpoint_manifest(std::string(dflow::fuzz::as_text(data, size)), "step-1/manifest.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const auto& file : manifest.files) {
    const std::filesystem::path name(file.name);
    if (file.name.empty() || name.is_absolute()) std::abort();
    for (const auto& part : name) {
      if (part == "..") std::abort();
    }
  }
  return 0;
}
