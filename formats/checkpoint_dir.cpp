// Hugging Face checkpoint directories: one model.safetensors, a sharded set
// described by model.safetensors.index.json, or loose *.safetensors files.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/safetensors.hpp"

namespace dflow::formats {

namespace {

std::runtime_error dir_error(const std::filesystem::path& dir, const std::string& what) {
  return std::runtime_error("checkpoint directory '" + dir.string() + "': " + what);
}

TensorMap load_sharded(const std::filesystem::path& dir, const std::filesystem::path& index_path, bool with_float8) {
  // Open each shard once; a tensor listed for a shard must be in that shard.
  std::map<std::string, std::unique_ptr<SafetensorsFile>> shards;
  TensorMap result;
  for (const auto& [name, shard_name] : read_checkpoint_index(dir, index_path)) {
    auto it = shards.find(shard_name);
    if (it == shards.end()) it = shards.emplace(shard_name, std::make_unique<SafetensorsFile>(dir / shard_name)).first;
    if (!it->second->contains(name)) {
      throw dir_error(dir, "index puts tensor '" + name + "' in shard '" + shard_name +
                               "' but that shard does not hold it");
    }
    result.emplace(name, it->second->tensor(name, with_float8));
  }
  return result;
}

}  // namespace

std::map<std::string, std::string> read_checkpoint_index(const std::filesystem::path& dir,
                                                         const std::filesystem::path& index_path) {
  std::ifstream in(index_path);
  if (!in) throw dir_error(dir, "cannot open " + index_path.filename().string());
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw dir_error(dir, index_path.filename().string() + " is not valid JSON: " + e.what());
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw dir_error(dir, index_path.filename().string() + " has no 'weight_map' object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard_value] : index["weight_map"].items()) {
    if (!shard_value.is_string()) throw dir_error(dir, "weight_map entry '" + name + "' is not a file name");
    const std::string shard_name = shard_value.get<std::string>();
    if (!std::filesystem::exists(dir / shard_name)) {
      throw dir_error(dir, "index lists shard '" + shard_name + "' (for tensor '" + name +
                               "') but the file does not exist");
    }
    weight_map.emplace(name, shard_name);
  }
  return weight_map;
}

TensorMap load_checkpoint_dir(const std::filesystem::path& dir, bool with_float8) {
  if (!std::filesystem::is_directory(dir)) throw dir_error(dir, "is not a directory");
  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) return load_sharded(dir, index_path, with_float8);
  const auto single_path = dir / "model.safetensors";
  if (std::filesystem::exists(single_path)) return SafetensorsFile(single_path).all_tensors(with_float8);

  std::vector<std::filesystem::path> files;
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    if (item.is_regular_file() && item.path().extension() == ".safetensors") files.push_back(item.path());
  }
  if (files.empty()) throw dir_error(dir, "holds no *.safetensors file (expected model.safetensors or an index)");
  std::sort(files.begin(), files.end());
  TensorMap result;
  for (const auto& file : files) {
    for (auto& [name, tensor] : SafetensorsFile(file).all_tensors(with_float8)) {
      if (!result.emplace(name, tensor).second) {
        throw dir_error(dir, "tensor '" + name + "' appears in more than one file (second: " +
                                 file.filename().string() + ")");
      }
    }
  }
  return result;
}

}  // namespace dflow::formats
