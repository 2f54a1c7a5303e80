// config.json read for what the drafter takes from its target, from any
// decoder family: a target dflow cannot run (a mixture of experts, gpt-oss)
// still gives the drafter its sizes, vocabulary and tying. Whether dflow can
// run it is parse_hf_config's verdict, kept with the reason it gives.
#include <filesystem>
#include <stdexcept>

#include "target/hf_config.hpp"

namespace dflow::model {

namespace {

std::runtime_error head_error(const std::string& source, const std::string& what) {
  return std::runtime_error("config.json '" + source + "': " + what);
}

// A key the drafter copies from the target: it must be there.
int64_t needed_int(const nlohmann::json& json, const std::string& key, const std::string& source, const char* why) {
  if (!json.contains(key)) throw head_error(source, "lacks '" + key + "', which the drafter needs (" + why + ")");
  if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0)
    throw head_error(source, "'" + key + "' must be a positive integer (" + why + "), got " + json[key].dump());
  return json[key].get<int64_t>();
}

int64_t int_or(const nlohmann::json& json, const std::string& key, int64_t fallback) {
  return json.contains(key) && json[key].is_number_integer() ? json[key].get<int64_t>() : fallback;
}

double number_or(const nlohmann::json& json, const std::string& key, double fallback) {
  return json.contains(key) && json[key].is_number() ? json[key].get<double>() : fallback;
}

// parse_hf_config's message without its "model config '<source>': " prefix.
std::string refusal_of(const std::string& message, const std::string& source) {
  const std::string prefix = "model config '" + source + "': ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// The drafter's facts of a config dflow cannot run, read leniently: only
// what the drafter copies, with the defaults transformers uses.
void read_head_facts(const nlohmann::json& json, const std::string& source, HeadConfig& config) {
  config.hidden_size = needed_int(json, "hidden_size", source, "the width of its features and of the embedding");
  config.vocab_size = needed_int(json, "vocab_size", source, "the rows of the embedding and the LM head");
  config.num_hidden_layers = needed_int(json, "num_hidden_layers", source, "which target layers it reads");
  config.num_attention_heads = needed_int(json, "num_attention_heads", source, "the drafter copies its attention shape");
  config.intermediate_size = needed_int(json, "intermediate_size", source, "the drafter copies its MLP width");
  config.num_key_value_heads = int_or(json, "num_key_value_heads", config.num_attention_heads);
  config.head_dim = int_or(json, "head_dim", config.hidden_size / config.num_attention_heads);
  config.max_position_embeddings = int_or(json, "max_position_embeddings", 0);
  config.rms_norm_eps = number_or(json, "rms_norm_eps", 1e-6);
  config.rope_theta = number_or(json, "rope_theta", 10000.0);
  if (json.contains("rope_parameters") && json["rope_parameters"].is_object())
    config.rope_theta = number_or(json["rope_parameters"], "rope_theta", config.rope_theta);
  config.tie_word_embeddings = json.contains("tie_word_embeddings") && json["tie_word_embeddings"].is_boolean() &&
                               json["tie_word_embeddings"].get<bool>();
  read_hf_special_tokens(json, config);
  if (config.mask_token_id && (*config.mask_token_id < 0 || *config.mask_token_id >= config.vocab_size))
    throw head_error(source, "mask token id " + std::to_string(*config.mask_token_id) +
                                 " is outside the vocabulary of " + std::to_string(config.vocab_size));
}

}  // namespace

HeadConfig runnable_head_config(const HFConfig& config) {
  HeadConfig head;
  static_cast<HFConfig&>(head) = config;
  head.architecture = config.architectures.empty() ? config.model_type : config.architectures.front();
  return head;
}

HeadConfig parse_head_config(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw head_error(source, "is not a JSON object");
  HeadConfig config;
  try {
    config = runnable_head_config(parse_hf_config(json, source));
  } catch (const std::runtime_error& e) {
    config = HeadConfig{};
    config.not_runnable_because = refusal_of(e.what(), source);
    config.model_type = json.value("model_type", std::string());
    if (json.contains("architectures") && json["architectures"].is_array())
      for (const auto& name : json["architectures"])
        if (name.is_string()) config.architectures.push_back(name.get<std::string>());
    config.architecture = config.architectures.empty() ? config.model_type : config.architectures.front();
    try {
      HFConfig names = config;
      config.family = detect_family(names, source);
    } catch (const std::runtime_error&) {
      // An architecture dflow does not know: its norms are taken as a dense family's.
    }
    read_head_facts(json, source, config);
  }
  for (const auto& name : config.architectures)
    if (name == "DFlashDraftModel") throw head_error(source, "holds a DFlash drafter, not a target model");
  return config;
}

HeadConfig load_head_config(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  if (!std::filesystem::exists(file))
    throw std::runtime_error("model config '" + file.string() + "' does not exist (expected a Hugging Face config.json)");
  return parse_head_config(read_json_file(file), file.string());
}

}  // namespace dflow::model
