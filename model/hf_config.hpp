// Hugging Face config.json for the supported decoder families.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dflow::model {

enum class ModelFamily { Qwen3, Qwen2, Llama };
std::string to_string(ModelFamily family);

struct HFConfig {
  ModelFamily family = ModelFamily::Qwen3;
  std::string model_type;                 // e.g. "qwen3"
  std::vector<std::string> architectures;  // e.g. ["Qwen3ForCausalLM"]
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool attention_bias = false;         // q/k/v projections have biases (always for Qwen2)
  bool attention_output_bias = false;  // o_proj has a bias (never for Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  bool tie_word_embeddings = false;
  std::vector<int64_t> eos_token_ids;
  // From `dflow_mask_token_id` or `dflash_config.mask_token_id`.
  std::optional<int64_t> mask_token_id;
  // True for an exported DFlash drafter (architectures ["DFlashDraftModel"]).
  bool is_dflash_drafter = false;

  int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
};

// Parses and validates; `source` names the file in error messages.
// Refuses unsupported families and any rope scaling, naming them.
HFConfig parse_hf_config(const nlohmann::json& json, const std::string& source);

// eos_token_id (an id or a list) and the mask token id into `config`.
void read_hf_special_tokens(const nlohmann::json& json, HFConfig& config);

// `path` is a config.json or a directory holding one.
HFConfig load_hf_config(const std::filesystem::path& path);

// What the drafter needs from a target it does not run (model/hf_head_config.cpp):
// sizes, vocabulary, tying, eos ids, rms_norm_eps, rope_theta, layer count,
// read from any decoder's config.json, whether or not dflow can run the
// family. Runnable means parse_hf_config accepts the config: a family added
// there becomes runnable here with no other change.
struct HeadConfig : HFConfig {
  // architectures[0] ("GptOssForCausalLM"), or model_type without architectures.
  std::string architecture;
  // Why dflow cannot run the whole target: parse_hf_config's refusal without
  // its file prefix (the family, or a key and value such as a rope scaling
  // type). "" when it can; `family` means something only then.
  std::string not_runnable_because;
  bool runnable() const { return not_runnable_because.empty(); }
};

// Refuses a DFlash drafter's config and a key the drafter needs that is
// missing or not a positive integer, naming `source` and the key.
HeadConfig parse_head_config(const nlohmann::json& json, const std::string& source);
HeadConfig load_head_config(const std::filesystem::path& path);  // a config.json or its directory
// The head config of a config dflow runs (TargetModel::head()).
HeadConfig runnable_head_config(const HFConfig& config);
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace dflow::model
