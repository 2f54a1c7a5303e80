#include "target/tiny_target.hpp"

#include <torch/torch.h>

#include <stdexcept>

#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"
#include "formats/safetensors_sharded.hpp"
#include "target/tiny_target_parts.hpp"

namespace dflow::target {

HFConfig make_tiny_target(const TinyTargetOptions& o) {
  if (o.out_dir.empty()) throw std::invalid_argument("make_tiny_target: out_dir is empty");
  tiny::check_options(o);
  const nlohmann::json config_json = tiny::config_json(o);
  const HFConfig config = parse_hf_config(config_json, (o.out_dir / "config.json").string());

  torch::NoGradGuard no_grad;
  std::filesystem::create_directories(o.out_dir);
  if (o.max_shard_bytes > 0) {  // written as drawn: the presets' tens of GB never sit in memory at once
    formats::ShardedSafetensorsWriter writer(o.out_dir, o.max_shard_bytes);
    const TensorSink add = [&](std::string name, torch::Tensor tensor) { writer.add(std::move(name), std::move(tensor)); };
    if (o.pattern == "echo") {
      for (auto& [name, tensor] : echo_tiny_weights(o, config)) add(name, tensor);
    } else {
      random_tiny_weights(o, config, add);
    }
    writer.finish();
  } else {
    NamedTensorList tensors;
    if (o.pattern == "echo") tensors = echo_tiny_weights(o, config);
    else random_tiny_weights(o, config, [&](std::string name, torch::Tensor t) { tensors.emplace_back(std::move(name), std::move(t)); });
    formats::write_safetensors(o.out_dir / "model.safetensors", tensors, {{"format", "pt"}});
  }
  formats::write_json_atomically(o.out_dir / "config.json", config_json);
  return config;
}

}  // namespace dflow::target
