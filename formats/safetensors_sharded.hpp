// Writing Hugging Face's sharded safetensors layout (reading it is
// load_checkpoint_dir in formats/safetensors.hpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dflow::formats {

// model-0000i-of-0000n.safetensors of at most max_shard_bytes each (whole
// tensors, in the given order, as save_pretrained groups them; a larger
// tensor gets a shard of its own) and model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map": {name: shard}}), written last
// so that a reader that finds the index finds every shard it names.
void write_sharded_safetensors(const std::filesystem::path& dir,
                               const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                               int64_t max_shard_bytes);

// The same layout written as the tensors come, holding at most one shard:
// a model larger than memory (random weights at 8B shapes on a small
// machine) is drawn and written a shard at a time. Shards are written as
// model-0000i.safetensors.part (which no reader picks up) and get their
// -of-0000n names in finish(), which writes the index last.
class ShardedSafetensorsWriter {
 public:
  ShardedSafetensorsWriter(std::filesystem::path dir, int64_t max_shard_bytes);
  void add(std::string name, torch::Tensor tensor);
  void finish();

 private:
  void write_pending();
  std::filesystem::path dir_;
  int64_t max_shard_bytes_;
  std::vector<std::pair<std::string, torch::Tensor>> pending_;
  int64_t pending_bytes_ = 0, total_bytes_ = 0;
  std::vector<std::vector<std::string>> shard_tensors_;  // the names each written shard holds
  std::set<std::string> names_;
};

}  // namespace dflow::formats
