// The drafter in vllm-project/speculators' DFlash layout, the format vLLM
// serves as a speculators checkpoint: config.json names the verifier (the
// target) in speculators_config.verifier, and the weights carry the target's
// embedding and LM head beside the draft layers, as speculators'
// DFlashDraftModel.save_pretrained writes them; a drafter with DSpark heads
// in its DSpark layout (DSparkSpeculatorConfig, DSparkDraftModel), which
// vLLM's dspark method serves. dflow's default export stays z-lab's layout
// (model::save_pretrained), which names no target.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/drafter.hpp"
#include "model/hf_config.hpp"

namespace dflow::model {

struct SpeculatorsVerifier {
  std::string name_or_path;         // what the serving engine loads (a Hub id or a path)
  std::filesystem::path local_dir;  // where its config.json and head tensors are read
};

// DSpark's head fields under speculators' names (markov_rank,
// markov_head_type, enable_confidence_head, confidence_head_with_markov),
// the one place that writes them: this export's config.json and the default
// one's (drafter_config_json, checkpoints included) take them from here.
// Empty without heads; confidence_head_with_markov is false without a
// confidence head (the flag only shapes that head's input).
nlohmann::json dspark_head_fields(const DraftHeads& heads);

// config.json: speculators' DFlashSpeculatorConfig as it serialises. Throws,
// naming the key, when the target's config disagrees with the drafter
// (hidden_size, vocab_size, num_hidden_layers) or when a feature layer is the
// target's last, which speculators' aux_hidden_state_layer_ids cannot name.
nlohmann::json speculators_config_json(const DrafterSpec& spec, torch::Dtype dtype, const HeadConfig& verifier,
                                       const std::string& verifier_name_or_path);

// Writes config.json and model.safetensors (draft weights plus the target's
// embed_tokens.weight and lm_head.weight, in the drafter's dtype) into `dir`.
void save_speculators_pretrained(DFlashDrafterImpl& drafter, const SpeculatorsVerifier& verifier,
                                 const std::filesystem::path& dir);

}  // namespace dflow::model
