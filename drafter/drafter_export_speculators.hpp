// The drafter in vllm-project/speculators' DFlash layout, the format vLLM
// serves as a speculators checkpoint: config.json names the verifier (the
// target) in speculators_config.verifier, and the weights carry the target's
// embedding and LM head beside the draft layers, as speculators'
// DFlashDraftModel.save_pretrained writes them; a drafter of another kind
// in the layout speculators gives that kind (its config class and model,
// which vLLM serves). dflow's default export stays z-lab's layout
// (drafter::save_pretrained), which names no target.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "drafter/drafter.hpp"
#include "target/hf_config.hpp"

namespace dflow::drafter {

struct SpeculatorsVerifier {
  std::string name_or_path;         // what the serving engine loads (a Hub id or a path)
  std::filesystem::path local_dir;  // where its config.json and head tensors are read
};

// config.json: speculators' DFlashSpeculatorConfig as it serialises. Throws,
// naming the key, when the target's config disagrees with the drafter
// (hidden_size, vocab_size, num_hidden_layers) or when a feature layer is the
// target's last, which speculators' aux_hidden_state_layer_ids cannot name.
nlohmann::json speculators_config_json(const DrafterSpec& spec, torch::Dtype dtype, const target::HeadConfig& verifier,
                                       const std::string& verifier_name_or_path);

// Writes config.json and model.safetensors (draft weights plus the target's
// embed_tokens.weight and lm_head.weight, in the drafter's dtype) into `dir`.
void save_speculators_pretrained(DFlashDrafterImpl& drafter, const SpeculatorsVerifier& verifier,
                                 const std::filesystem::path& dir);

}  // namespace dflow::drafter
