// config.json parsing: the keys every decoder has here, each family's own in
// model/hf_config_*.cpp; everything dflow cannot reproduce exactly (a rope
// scaling type, a sliding window, another activation) is refused rather than
// silently approximated.
#include "target/hf_config.hpp"

#include "target/hf_config_families.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace dflow::target {

std::string to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::Qwen3: return "qwen3";
    case ModelFamily::Qwen2: return "qwen2";
    case ModelFamily::Llama: return "llama";
    case ModelFamily::Qwen3Moe: return "qwen3_moe";
    case ModelFamily::GptOss: return "gpt_oss";
    case ModelFamily::Qwen3_5: return "qwen3_5";
    case ModelFamily::Qwen3_5Moe: return "qwen3_5_moe";
  }
  return "unknown";
}

namespace config_parse {

std::runtime_error config_error(const std::string& source, const std::string& what) {
  return std::runtime_error("model config '" + source + "': " + what);
}

int64_t required_int(const nlohmann::json& json, const std::string& key, const std::string& source) {
  if (!json.contains(key) || !json[key].is_number_integer()) {
    throw config_error(source, "missing or non-integer '" + key + "'");
  }
  const int64_t value = json[key].get<int64_t>();
  if (value <= 0) throw config_error(source, "'" + key + "' must be positive, got " + std::to_string(value));
  return value;
}

int64_t optional_int(const nlohmann::json& json, const std::string& key, int64_t fallback) {
  return json.contains(key) && json[key].is_number_integer() ? json[key].get<int64_t>() : fallback;
}

double optional_number(const nlohmann::json& json, const std::string& key, double fallback) {
  return json.contains(key) && json[key].is_number() ? json[key].get<double>() : fallback;
}

bool optional_bool(const nlohmann::json& json, const std::string& key, bool fallback) {
  return json.contains(key) && json[key].is_boolean() ? json[key].get<bool>() : fallback;
}

void read_plain_rope(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  if (json.contains("rope_scaling") && !json["rope_scaling"].is_null()) {
    throw config_error(source, "rope_scaling " + json["rope_scaling"].dump() +
                                   " is not supported (dflow implements plain RoPE only)");
  }
  config.rope_theta = optional_number(json, "rope_theta", 10000.0);
  // Newer transformers releases move the RoPE settings into rope_parameters.
  if (json.contains("rope_parameters") && json["rope_parameters"].is_object()) {
    const auto& rope = json["rope_parameters"];
    const std::string rope_type = rope.value("rope_type", std::string("default"));
    if (rope_type != "default") {
      throw config_error(source, "rope_parameters " + rope.dump() + " (rope_type '" + rope_type +
                                     "') is not supported (dflow implements plain RoPE only)");
    }
    config.rope_theta = optional_number(rope, "rope_theta", config.rope_theta);
  }
}

void check_quantization(const nlohmann::json& json, const std::string& family, const std::string& source) {
  if (!json.contains("quantization_config") || json["quantization_config"].is_null()) return;
  const nlohmann::json& q = json["quantization_config"];
  if (q.is_object() && q.value("quant_method", std::string()) == "fp8") {
    const std::string format = q.value("fmt", std::string("e4m3"));
    if (format != "e4m3" && format != "e5m2")
      throw config_error(source, "quantization_config.fmt '" + format + "' is not an FP8 format dflow reads (e4m3, e5m2)");
    return;
  }
  throw config_error(source, "quantization_config " + q.dump() + " is not supported for " + family +
                                 " (dflow loads unquantized weights, and FP8 ones (quant_method fp8) dequantized)");
}

void read_dense_family(const nlohmann::json& json, HFConfig& config, const std::string& source) {
  const std::string activation = json.value("hidden_act", std::string("silu"));
  if (activation != "silu") throw config_error(source, "hidden_act '" + activation + "' is not supported (only silu)");
  // A drafter's sliding layers are read with its DFlash fields (drafter_spec_from_config).
  if (!config.is_dflash_drafter && optional_bool(json, "use_sliding_window", false)) {
    throw config_error(source, "use_sliding_window is true; sliding-window attention is not supported");
  }
  if (optional_bool(json, "mlp_bias", false)) throw config_error(source, "mlp_bias is true; MLP biases are not supported");
  check_quantization(json, to_string(config.family), source);
  read_plain_rope(json, config, source);
  const bool configured_bias = optional_bool(json, "attention_bias", false);
  config.attention_bias = config.family == ModelFamily::Qwen2 ? true : configured_bias;
  config.attention_output_bias = config.family == ModelFamily::Qwen2 ? false : configured_bias;
  config.qk_norm = config.family == ModelFamily::Qwen3;
}

}  // namespace config_parse

namespace {
constexpr const char* kDrafterArchitecture = "DFlashDraftModel";
}  // namespace

using namespace config_parse;

ModelFamily detect_family(HFConfig& config, const std::string& source) {
  const std::vector<std::pair<std::string, ModelFamily>> by_type = {
      {"qwen3", ModelFamily::Qwen3},         {"qwen2", ModelFamily::Qwen2},  {"llama", ModelFamily::Llama},
      {"qwen3_moe", ModelFamily::Qwen3Moe}, {"gpt_oss", ModelFamily::GptOss},
      {"qwen3_5", ModelFamily::Qwen3_5},    {"qwen3_5_moe", ModelFamily::Qwen3_5Moe}};
  const std::vector<std::pair<std::string, ModelFamily>> by_architecture = {
      {"Qwen3ForCausalLM", ModelFamily::Qwen3},
      {"Qwen2ForCausalLM", ModelFamily::Qwen2},
      {"LlamaForCausalLM", ModelFamily::Llama},
      {"Qwen3MoeForCausalLM", ModelFamily::Qwen3Moe},
      {"GptOssForCausalLM", ModelFamily::GptOss},
      {"Qwen3_5ForConditionalGeneration", ModelFamily::Qwen3_5},
      {"Qwen3_5MoeForConditionalGeneration", ModelFamily::Qwen3_5Moe}};
  std::string architectures_text;
  for (const auto& name : config.architectures) architectures_text += (architectures_text.empty() ? "" : ", ") + name;
  const std::string described = "model_type '" + config.model_type + "', architectures [" + architectures_text + "]";

  std::optional<ModelFamily> family;
  for (const auto& [name, value] : by_type) {
    if (config.model_type == name) family = value;
  }
  if (!config.model_type.empty() && !family) {
    throw config_error(source, "unsupported " + described + "; dflow supports qwen3, qwen2, llama, qwen3_moe, gpt_oss, qwen3_5 and qwen3_5_moe");
  }
  for (const auto& architecture : config.architectures) {
    if (architecture == kDrafterArchitecture) {
      config.is_dflash_drafter = true;
      continue;
    }
    const auto it = std::find_if(by_architecture.begin(), by_architecture.end(),
                                 [&](const auto& item) { return item.first == architecture; });
    if (it == by_architecture.end()) {
      throw config_error(source, "unsupported architecture '" + architecture + "' (" + described +
                                     "); dflow supports Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, "
                                     "Qwen3MoeForCausalLM, GptOssForCausalLM, Qwen3_5ForConditionalGeneration, "
                                     "Qwen3_5MoeForConditionalGeneration");
    }
    if (family && *family != it->second) throw config_error(source, "inconsistent " + described);
    family = it->second;
  }
  if (!family) throw config_error(source, "neither model_type nor architectures name a supported family");
  if (config.is_dflash_drafter && *family != ModelFamily::Qwen3) {
    throw config_error(source, "a DFlashDraftModel config must have model_type 'qwen3', got " + described);
  }
  return *family;
}

void read_hf_special_tokens(const nlohmann::json& json, HFConfig& config) {
  if (json.contains("eos_token_id")) {
    const auto& eos = json["eos_token_id"];
    if (eos.is_number_integer()) config.eos_token_ids.push_back(eos.get<int64_t>());
    if (eos.is_array()) {
      for (const auto& id : eos) {
        if (id.is_number_integer()) config.eos_token_ids.push_back(id.get<int64_t>());
      }
    }
  }
  if (json.contains("dflow_mask_token_id") && json["dflow_mask_token_id"].is_number_integer()) {
    config.mask_token_id = json["dflow_mask_token_id"].get<int64_t>();
  } else if (json.contains("dflash_config") && json["dflash_config"].is_object() &&
             json["dflash_config"].contains("mask_token_id") &&
             json["dflash_config"]["mask_token_id"].is_number_integer()) {
    config.mask_token_id = json["dflash_config"]["mask_token_id"].get<int64_t>();
  }
}

HFConfig parse_hf_config(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw config_error(source, "is not a JSON object");
  HFConfig config;
  config.model_type = json.value("model_type", std::string());
  if (json.contains("architectures") && json["architectures"].is_array()) {
    for (const auto& name : json["architectures"]) {
      if (name.is_string()) config.architectures.push_back(name.get<std::string>());
    }
  }
  config.family = detect_family(config, source);
  // Qwen3.5/3.6 ship as multimodal wrappers: the text model's keys are in text_config.
  const bool wrapper = config.family == ModelFamily::Qwen3_5 || config.family == ModelFamily::Qwen3_5Moe;
  if (wrapper && !(json.contains("text_config") && json["text_config"].is_object())) {
    throw config_error(source, to_string(config.family) + " config without a 'text_config' object (the text model's "
                                                          "sizes; dflow reads the multimodal wrapper's text model)");
  }
  const nlohmann::json& body = wrapper ? json["text_config"] : json;
  const std::string where = wrapper ? source + " text_config" : source;
  if (wrapper) check_quantization(json, to_string(config.family), source);

  config.hidden_size = required_int(body, "hidden_size", where);
  config.num_hidden_layers = required_int(body, "num_hidden_layers", where);
  config.num_attention_heads = required_int(body, "num_attention_heads", where);
  // Qwen3.5-MoE has no dense MLP (every layer routed, with a shared expert).
  config.intermediate_size =
      config.family == ModelFamily::Qwen3_5Moe ? 0 : required_int(body, "intermediate_size", where);
  config.vocab_size = required_int(body, "vocab_size", where);
  config.num_key_value_heads = optional_int(body, "num_key_value_heads", config.num_attention_heads);
  config.head_dim = optional_int(body, "head_dim", config.hidden_size / config.num_attention_heads);
  config.max_position_embeddings = optional_int(body, "max_position_embeddings", 0);
  config.rms_norm_eps = optional_number(body, "rms_norm_eps", 1e-6);
  // A wrapper ties by its top-level key when it has one (as transformers does).
  config.tie_word_embeddings = optional_bool(json, "tie_word_embeddings", optional_bool(body, "tie_word_embeddings", false));
  read_hf_special_tokens(body, config);
  if (wrapper) {  // the top level's where text_config has none
    HFConfig top;
    read_hf_special_tokens(json, top);
    if (config.eos_token_ids.empty()) config.eos_token_ids = top.eos_token_ids;
    if (!config.mask_token_id) config.mask_token_id = top.mask_token_id;
  }
  switch (config.family) {
    case ModelFamily::Qwen3:
    case ModelFamily::Qwen2:
    case ModelFamily::Llama: read_dense_family(json, config, source); break;
    case ModelFamily::Qwen3Moe: read_qwen3_moe_family(json, config, source); break;
    case ModelFamily::GptOss: read_gpt_oss_family(json, config, source); break;
    case ModelFamily::Qwen3_5:
    case ModelFamily::Qwen3_5Moe: read_qwen3_5_family(body, config, where); break;
  }
  config.norm = config.family == ModelFamily::GptOss ? NormStyle::ScaleWide
                : wrapper                                 ? NormStyle::OnePlusWeight
                                                          : NormStyle::ScaleAfterCast;

  if (config.num_key_value_heads <= 0 || config.num_attention_heads % config.num_key_value_heads != 0) {
    throw config_error(source, "num_attention_heads " + std::to_string(config.num_attention_heads) +
                                   " is not a multiple of num_key_value_heads " +
                                   std::to_string(config.num_key_value_heads));
  }
  if (config.head_dim <= 0 || config.head_dim % 2 != 0) {
    throw config_error(source, "head_dim must be positive and even for RoPE, got " + std::to_string(config.head_dim));
  }
  if (config.mask_token_id && (*config.mask_token_id < 0 || *config.mask_token_id >= config.vocab_size)) {
    throw config_error(source, "mask token id " + std::to_string(*config.mask_token_id) +
                                   " is outside the vocabulary of " + std::to_string(config.vocab_size));
  }
  return config;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open '" + path.string() + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("'" + path.string() + "' is not valid JSON: " + e.what());
  }
}

HFConfig load_hf_config(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  if (!std::filesystem::exists(file)) {
    throw std::runtime_error("model config '" + file.string() + "' does not exist (expected a Hugging Face config.json)");
  }
  return parse_hf_config(read_json_file(file), file.string());
}

}  // namespace dflow::target
