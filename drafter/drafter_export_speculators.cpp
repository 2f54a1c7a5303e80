// The speculators export. Its field names and values are transcribed from
// vllm-project/speculators: src/speculators/models/dflash/config.py
// (DFlashSpeculatorConfig), src/speculators/config.py (SpeculatorsConfig,
// VerifierConfig), src/speculators/proposals/greedy.py, and how
// src/speculators/convert/dflash/converter.py turns a z-lab DFlash
// checkpoint (the layout of dflow's default export) into one. A drafter of
// another kind is written as speculators' model of that kind: the kind
// names it (DrafterKind::speculators_names) and gives its config fields;
// its modules' tensors carry speculators' names already.
#include "drafter/drafter_export_speculators.hpp"

#include <stdexcept>

#include "drafter/kind.hpp"
#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"
#include "target/target_head.hpp"

namespace dflow::drafter {

namespace {

// The speculators release whose layout this writes, the one
// tests/drafter/speculators_reference.py loads the export with (it checks
// that this field names the installed release; tools/setup.sh pins it).
constexpr const char* kSpeculatorsVersion = "0.9.0";

// z-lab's keys that are not part of the draft decoder's own (Qwen3) config:
// the converter's _NON_TRANSFORMER_KEYS.
const char* const kNonTransformerKeys[] = {"architectures", "auto_map", "block_size", "dflash_config",
                                           "num_target_layers"};

std::runtime_error refusal(const std::string& source, const std::string& what) {
  return std::runtime_error("export --format speculators: target '" + source + "': " + what);
}

}  // namespace

nlohmann::json speculators_config_json(const DrafterSpec& spec, torch::Dtype dtype, const target::HeadConfig& verifier,
                                       const std::string& verifier_name_or_path) {
  const std::string& source = verifier_name_or_path;
  auto mismatch = [&](const std::string& key, int64_t target_value, int64_t drafter_value) {
    return refusal(source, "config.json " + key + " is " + std::to_string(target_value) + " but the drafter's is " +
                               std::to_string(drafter_value) + " (is this the target it was trained on?)");
  };
  if (verifier.hidden_size != spec.hidden_size) throw mismatch("hidden_size", verifier.hidden_size, spec.hidden_size);
  // dflow's drafter predicts the target's whole vocabulary; speculators'
  // smaller draft vocabularies (t2d/d2t) are not used.
  if (verifier.vocab_size != spec.vocab_size) throw mismatch("vocab_size", verifier.vocab_size, spec.vocab_size);
  if (spec.num_target_layers != 0 && verifier.num_hidden_layers != spec.num_target_layers) {
    throw mismatch("num_hidden_layers", verifier.num_hidden_layers, spec.num_target_layers);
  }
  if (verifier.architectures.empty()) throw refusal(source, "config.json has no architectures to name the verifier by");
  // vLLM's speculators adapter (update_dflash) requires mask_token_id.
  if (spec.mask_token_id < 0) {
    throw std::runtime_error("export --format speculators: the drafter has no mask token (dflash_config.mask_token_id), "
                             "which speculators' DFlash format requires");
  }

  // dflow's (and z-lab's) layer id l reads Hugging Face's hidden_states[l+1];
  // speculators names that hidden state l+1, and its serving path always
  // takes the target's last layer apart (the verifier's own output, never a
  // drafter input), so a drafter that reads the last layer has no name there.
  // vLLM collects a target layer's hidden state once and in layer order
  // (`if idx in aux_hidden_state_layers: append`), so the drafter's feature
  // layers must rise strictly for its fc columns to meet the right features.
  nlohmann::json aux_ids = nlohmann::json::array();
  for (size_t i = 1; i < spec.target_layer_ids.size(); ++i) {
    if (spec.target_layer_ids[i] <= spec.target_layer_ids[i - 1]) {
      throw std::runtime_error("export --format speculators: the drafter's target layers " +
                               nlohmann::json(spec.target_layer_ids).dump() +
                               " (dflash_config.target_layer_ids) repeat or fall, but a speculators server collects "
                               "each target layer once, in layer order; export it in the default --format dflash, "
                               "or train with rising ids (model.drafter.target_layer_ids)");
    }
  }
  for (const int64_t layer : spec.target_layer_ids) {
    if (layer + 1 == verifier.num_hidden_layers) {
      throw std::runtime_error(
          "export --format speculators: the drafter reads target layer " + std::to_string(layer) +
          " (dflash_config.target_layer_ids), the target's last, which speculators' aux_hidden_state_layer_ids "
          "cannot name (its serving path keeps the last layer for the verifier); export it in the default "
          "--format dflash, or train with target layer ids below " +
          std::to_string(verifier.num_hidden_layers - 1));
    }
    aux_ids.push_back(layer + 1);
  }

  nlohmann::json layer_config = drafter_config_json(spec, dtype);
  for (const char* key : kNonTransformerKeys) layer_config.erase(key);
  // The kind's fields are the speculator config's own, not the layers'.
  const DrafterKind& kind = drafter_kind(spec.kind);
  const nlohmann::json kind_fields = kind.config_fields(spec.kind_fields);
  for (const auto& field : kind_fields.items()) layer_config.erase(field.key());
  const nlohmann::json dtype_name = layer_config["torch_dtype"];

  // Another kind is DFlash's config with its own names and fields (as
  // speculators' models of other kinds build theirs on DFlash's); dflow keeps DFlash's blocks (sample_from_anchor
  // false: the anchor is the known token, block_size - 1 slots are
  // drafted), which such a kind takes as an explicit choice, and its
  // default proposal length follows.
  const SpeculatorsNames names = kind.speculators_names();
  nlohmann::json config = {
      {"architectures", nlohmann::json::array({names.architecture})},
      {"speculators_model_type", names.model_type},
      {"speculators_version", kSpeculatorsVersion},
      {"transformer_layer_config", layer_config},
      {"draft_vocab_size", spec.vocab_size},
      {"block_size", spec.block_size},
      {"target_hidden_size", nullptr},
      {"aux_hidden_state_layer_ids", aux_ids},
      {"mask_token_id", spec.mask_token_id},
      // dflow's draft blocks attend bidirectionally in every layer, sliding
      // ones too (vLLM's adapter sets dflash_config.causal to its negation).
      {"sliding_window_non_causal", true},
      // The anchor is the known token; the block's other positions are drafted.
      {"sample_from_anchor", false},
      {"speculators_config",
       {{"algorithm", names.algorithm},
        {"proposal_methods", nlohmann::json::array({nlohmann::json{{"proposal_type", "greedy"},
                                                                   {"speculative_tokens", spec.block_size - 1},
                                                                   {"verifier_accept_k", 1},
                                                                   {"accept_tolerance", 0.0}}})},
        {"default_proposal_method", "greedy"},
        {"verifier", {{"name_or_path", verifier_name_or_path}, {"architectures", verifier.architectures}}}}},
      {"torch_dtype", dtype_name},
  };
  config.update(kind_fields);
  return config;
}

void save_speculators_pretrained(DFlashDrafterImpl& drafter, const SpeculatorsVerifier& verifier,
                                 const std::filesystem::path& dir) {
  if (!std::filesystem::exists(verifier.local_dir / "config.json")) {
    throw refusal(verifier.local_dir.string(), "has no config.json (pass --target DIR, a local copy of the verifier)");
  }
  const torch::Dtype dtype = drafter.fc->weight.scalar_type();
  const target::HeadConfig head_config = target::load_head_config(verifier.local_dir);
  const nlohmann::json config = speculators_config_json(drafter.spec(), dtype, head_config, verifier.name_or_path);

  // DFlashDraftModel's (or the kind's model's) state dict as its
  // save_pretrained writes it: the draft body under the same names as
  // z-lab's, the kind's modules under their own, plus the
  // verifier's embedding and LM head (verifier_lm_head and verifier_norm are in its
  // _keys_to_ignore_on_save and reloaded from the verifier; t2d/d2t exist
  // only for a smaller draft vocabulary).
  const target::TargetHead head = target::TargetHead::load(verifier.local_dir, torch::kCPU, dtype);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : drafter.named_parameters(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
  tensors.emplace_back("embed_tokens.weight", head.embedding_weight());
  tensors.emplace_back("lm_head.weight", head.tied() ? head.lm_head_weight().clone() : head.lm_head_weight());

  std::filesystem::create_directories(dir);
  formats::write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  formats::write_json_atomically(dir / "config.json", config);
}

}  // namespace dflow::drafter
