// save_pretrained / load_pretrained for the DFlash drafter (its kind's modules
// included: their tensors are parameters like the backbone's, their shape in
// config.json).
#include <set>
#include <stdexcept>

#include "drafter/drafter.hpp"
#include "drafter/kind.hpp"
#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"

namespace dflow::drafter {

void save_pretrained(DFlashDrafterImpl& drafter, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : drafter.named_parameters(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
  for (auto& flag : drafter.kind_modules().saved_flags()) tensors.push_back(std::move(flag));
  formats::write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  formats::write_json_atomically(dir / "config.json",
                                 drafter_config_json(drafter.spec(), drafter.fc->weight.scalar_type()));
}

DFlashDrafter load_pretrained(const std::filesystem::path& dir) {
  const auto config_path = dir / "config.json";
  const DrafterSpec spec = drafter_spec_from_config(target::read_json_file(config_path), config_path.string());
  const formats::TensorMap tensors = formats::load_checkpoint_dir(dir);
  DFlashDrafter drafter(spec, /*init_seed=*/0);

  auto error = [&](const std::string& what) {
    return std::runtime_error("drafter checkpoint '" + dir.string() + "': " + what);
  };
  const auto fc_it = tensors.find("fc.weight");
  if (fc_it == tensors.end()) throw error("lacks tensor 'fc.weight'");
  drafter->to(fc_it->second.scalar_type());

  torch::NoGradGuard no_grad;
  std::set<std::string> expected_names;
  for (auto& item : drafter->named_parameters(/*recurse=*/true)) {
    expected_names.insert(item.key());
    const auto it = tensors.find(item.key());
    if (it == tensors.end()) throw error("lacks tensor '" + item.key() + "'");
    if (it->second.sizes() != item.value().sizes()) {
      throw error("tensor '" + item.key() + "' has shape " + c10::str(it->second.sizes()) + " but config.json implies " +
                  c10::str(item.value().sizes()));
    }
    item.value().copy_(it->second);
  }
  for (const auto& [name, value] : drafter->kind_modules().saved_flags()) {
    expected_names.insert(name);
    const auto it = tensors.find(name);
    if (it == tensors.end()) continue;  // a checkpoint of dflow's own (its training state) has none
    if (it->second.sizes() != value.sizes() || !torch::equal(it->second.to(value.scalar_type()), value))
      throw error("tensor '" + name + "' is " + c10::str(it->second) + ", where a drafter of kind '" + spec.kind +
                  "' ready to use has " + c10::str(value));
  }
  for (const auto& [name, tensor] : tensors) {
    if (expected_names.count(name) == 0) {
      throw error("has unexpected tensor '" + name + "' (config.json's drafter, of kind '" + spec.kind +
                  "', has no such parameter: config.json and weights disagree?)");
    }
  }
  return drafter;
}

}  // namespace dflow::drafter
