#pragma once
// What a drafter was trained against, recorded in every checkpoint
// (step-N/drafter/trained_against.json) and every export (beside config.json,
// and inside it as `dflow_trained_against`), and checked where a drafter
// meets a target again: a resume, `dflow eval --target`, `dflow export
// --verifier/--target`. The causes users find late for a served acceptance
// far below the trained one are each an item here: another target (revision,
// size, fine-tune), a quantized copy, another tokenizer, other prompts'
// rendering, other target layers.
//
// The record (version 1):
//   target     identity of the target directory (TargetIdentity)
//   compute_dtype  the dtype the target computed features in (model.target.dtype)
//   data       per training directory: its tokenizer fingerprint and the chat
//              template that rendered it (what `dflow prepare` records)
//   target_layer_ids      dflow's numbering: layer l's output
//   hidden_states_indices the same layers in Hugging Face's hidden_states
//                         (and speculators' / vLLM's) numbering: l + 1
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dflow::train {

inline constexpr const char* kTrainedAgainstFile = "trained_against.json";
inline constexpr int kTrainedAgainstVersion = 1;
// The key of the exported config.json that carries the same record (Hugging
// Face's and speculators' config loaders keep unknown keys).
inline constexpr const char* kTrainedAgainstConfigKey = "dflow_trained_against";

struct TargetIdentity {
  std::string path;              // informational: where it was read
  nlohmann::json config;         // config.json without the keys that do not change outputs (identity_config)
  std::string embedding;         // xxh64 of the embedding's values rounded to bfloat16, and its shape
  std::string lm_head;           // the same for the LM head; "tied" when the embedding serves as head
  std::string weights;           // every safetensors file's header and sampled bytes (weights_fingerprint)
  std::string checkpoint_dtype;  // config.json's torch_dtype (or dtype)
  std::string quantization;      // "none", or quantization_config's method and layout ("fp8, block 128x128")
  std::string tokenizer;         // the tokenizer.json's fingerprint (text::Tokenizer); "none" without one

  nlohmann::json to_json() const;
  static TargetIdentity from_json(const nlohmann::json& json, const std::string& where);
};

// config.json with the keys removed that a copy of the same model may change
// without changing its outputs (the dtype it is stored in, its quantization,
// its name and the library version that wrote it, generation conveniences),
// at the top level and in a multimodal wrapper's text_config.
nlohmann::json identity_config(nlohmann::json config);

// Reads config.json, tokenizer.json, the embedding and LM head (their bytes
// only) and the safetensors headers of `target_dir`. Throws naming the
// directory when its config.json is unreadable.
TargetIdentity target_identity(const std::filesystem::path& target_dir);

struct TrainedData {
  std::string dir;
  std::string tokenizer;      // the fingerprint the dataset records; "" when it records none (token-id input)
  std::string chat_template;  // "" when unknown
};

struct TrainedAgainst {
  int version = kTrainedAgainstVersion;
  TargetIdentity target;
  std::string compute_dtype;
  std::vector<TrainedData> data;
  std::vector<int64_t> target_layer_ids;

  nlohmann::json to_json() const;
  // Throws ConfigError naming `where` and the field for a malformed record,
  // and for one a newer dflow wrote (its version above this one's).
  static TrainedAgainst from_json(const nlohmann::json& json, const std::string& where);
};

// The record of a training run: the target directory's identity, the
// datasets' recorded tokenizer and template.
TrainedAgainst trained_against(const std::filesystem::path& target_dir, const std::string& compute_dtype,
                               const std::vector<std::string>& data_dirs, const std::vector<int64_t>& layer_ids);

// dir/trained_against.json, or nullopt when the directory has none (written
// by a dflow before the record existed). Throws ConfigError naming the file
// for an unreadable one.
std::optional<TrainedAgainst> read_trained_against(const std::filesystem::path& dir);
void write_trained_against(const std::filesystem::path& dir, const TrainedAgainst& record);

// How a target given now relates to the recorded one.
struct TargetCheck {
  enum class Verdict {
    same,           // the same files
    same_model,     // the same model stored otherwise (a quantized copy, another dtype): allowed, named
    other_weights,  // same shapes, embedding, head and tokenizer, other layers (a revision or fine-tune)
    other_target,   // another model: other shapes, head or tokenizer
  };
  Verdict verdict = Verdict::same;
  std::string summary;             // one sentence: what it is and what it does to acceptance
  std::vector<std::string> items;  // one line per field that differs: "config.json num_hidden_layers: 4 -> 8"

  // Drafting for it is refused unless the user allows another target.
  bool refused() const { return verdict == Verdict::other_weights || verdict == Verdict::other_target; }
  // The summary and the items, one per line, each indented by `indent`.
  std::string describe(const std::string& indent = "  ") const;
};
TargetCheck check_target(const TargetIdentity& recorded, const TargetIdentity& given);

// A human reading of a record: what `dflow inspect` prints.
std::string describe(const TrainedAgainst& record, const std::string& indent = "  ");

}  // namespace dflow::train
