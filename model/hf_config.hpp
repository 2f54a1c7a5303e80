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

// `path` is a config.json or a directory holding one.
HFConfig load_hf_config(const std::filesystem::path& path);
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace dflow::model
