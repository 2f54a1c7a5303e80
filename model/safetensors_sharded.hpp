// Writing Hugging Face's sharded safetensors layout (reading it is
// load_checkpoint_dir in model/safetensors.hpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace dflow::model {

// model-0000i-of-0000n.safetensors of at most max_shard_bytes each (whole
// tensors, in the given order, as save_pretrained groups them; a larger
// tensor gets a shard of its own) and model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map": {name: shard}}), written last
// so that a reader that finds the index finds every shard it names.
void write_sharded_safetensors(const std::filesystem::path& dir,
                               const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                               int64_t max_shard_bytes);

}  // namespace dflow::model
