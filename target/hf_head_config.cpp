// config.json read for what the drafter takes from its target, from any
// decoder family: a target dflow cannot run (an FP8 gpt-oss, a multimodal
// wrapper such as Qwen3.5's) still gives the drafter its sizes, vocabulary
// and tying. Whether dflow can
// run it is parse_hf_config's verdict, kept with the reason it gives.
#include <filesystem>
#include <stdexcept>

#include "target/hf_config.hpp"

namespace dflow::target {

namespace {

std::runtime_error head_error(const std::string& source, const std::string& what) {
  return std::runtime_error("config.json '" + source + "': " + what);
}

// A key the drafter copies from the target: it must be there. `prefix`
// names where it is read ("text_config." in a multimodal wrapper).
int64_t needed_int(const nlohmann::json& json, const std::string& prefix, const std::string& key,
                   const std::string& source, const char* why) {
  if (!json.contains(key))
    throw head_error(source, "lacks '" + prefix + key + "', which the drafter needs (" + why + ")");
  if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0)
    throw head_error(source, "'" + prefix + key + "' must be a positive integer (" + why + "), got " + json[key].dump());
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
// what the drafter copies, with the defaults transformers uses. `prefix`
// names `json` in errors; a config without a dense MLP width (a wrapper's
// MoE text config) reads intermediate_size 0 when `mlp_width_optional`.
void read_head_facts(const nlohmann::json& json, const std::string& prefix, const std::string& source,
                     bool mlp_width_optional, HeadConfig& config) {
  config.hidden_size = needed_int(json, prefix, "hidden_size", source, "the width of its features and of the embedding");
  config.vocab_size = needed_int(json, prefix, "vocab_size", source, "the rows of the embedding and the LM head");
  config.num_hidden_layers = needed_int(json, prefix, "num_hidden_layers", source, "which target layers it reads");
  config.num_attention_heads =
      needed_int(json, prefix, "num_attention_heads", source, "the drafter copies its attention shape");
  config.intermediate_size = mlp_width_optional && !json.contains("intermediate_size")
                                 ? 0
                                 : needed_int(json, prefix, "intermediate_size", source, "the drafter copies its MLP width");
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
}

void check_mask_token(const HeadConfig& config, const std::string& source) {
  if (config.mask_token_id && (*config.mask_token_id < 0 || *config.mask_token_id >= config.vocab_size))
    throw head_error(source, "mask token id " + std::to_string(*config.mask_token_id) +
                                 " is outside the vocabulary of " + std::to_string(config.vocab_size));
}

// The multimodal wrappers transformers 5.24 writes whose text model the
// drafter can serve, and how each one's final norm scales.
struct Wrapper {
  const char* architecture;
  NormStyle norm;
};
constexpr Wrapper kWrappers[] = {
    {"Qwen3_5ForConditionalGeneration", NormStyle::OnePlusWeight},      // Qwen3_5RMSNorm
    {"Qwen3_5MoeForConditionalGeneration", NormStyle::OnePlusWeight},   // Qwen3_5MoeRMSNorm
    {"Qwen3VLForConditionalGeneration", NormStyle::ScaleAfterCast},     // Qwen3VLTextRMSNorm
    {"Qwen3VLMoeForConditionalGeneration", NormStyle::ScaleAfterCast},  // Qwen3VLMoeTextRMSNorm
    {"Llama4ForConditionalGeneration", NormStyle::ScaleAfterCast},      // Llama4TextRMSNorm
};

// A wrapper (...ForConditionalGeneration with a text_config) dflow does not
// run in-process: the text model's facts, and why not (`refusal`,
// parse_hf_config's, for a family dflow runs whose config it refused).
void read_wrapper(const nlohmann::json& json, const std::string& source, const std::string& refusal,
                  HeadConfig& config) {
  const auto& text = json["text_config"];
  if (config.architecture == "Gemma3ForConditionalGeneration")
    throw head_error(source, "Gemma3ForConditionalGeneration scales its embedding by sqrt(hidden_size) "
                             "(Gemma3TextScaledWordEmbedding), which the drafter's frozen embedding does not: dflow "
                             "cannot train a drafter for it");
  config.text_model_type = text.value("model_type", std::string("text_config"));
  read_head_facts(text, "text_config.", source, /*mlp_width_optional=*/true, config);
  // transformers ties by the top-level key when it is there.
  if (json.contains("tie_word_embeddings") && json["tie_word_embeddings"].is_boolean())
    config.tie_word_embeddings = json["tie_word_embeddings"].get<bool>();
  if (config.eos_token_ids.empty() || !config.mask_token_id) {
    HFConfig top;
    read_hf_special_tokens(json, top);
    if (config.eos_token_ids.empty()) config.eos_token_ids = top.eos_token_ids;
    if (!config.mask_token_id) config.mask_token_id = top.mask_token_id;
  }
  config.norm = NormStyle::Unknown;
  for (const auto& known : kWrappers)
    if (config.architecture == known.architecture) config.norm = known.norm;
  const bool runs_family = config.architecture == "Qwen3_5ForConditionalGeneration" ||
                           config.architecture == "Qwen3_5MoeForConditionalGeneration";
  config.not_runnable_because = runs_family ? refusal
                                            : "a multimodal wrapper (its text model '" + config.text_model_type +
                                                  "' in text_config), which dflow does not run in-process";
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
  const bool wrapper = json.contains("text_config") && json["text_config"].is_object();
  std::string refusal;
  try {
    // Qwen3.5/3.6's wrappers run in-process: parse_hf_config reads their text_config.
    config = runnable_head_config(parse_hf_config(json, source));
    if (wrapper) config.text_model_type = json["text_config"].value("model_type", std::string("text_config"));
  } catch (const std::runtime_error& e) {
    refusal = refusal_of(e.what(), source);
  }
  if (!refusal.empty()) {
    config.not_runnable_because = refusal;
    config.model_type = json.value("model_type", std::string());
    if (json.contains("architectures") && json["architectures"].is_array())
      for (const auto& name : json["architectures"])
        if (name.is_string()) config.architectures.push_back(name.get<std::string>());
    config.architecture = config.architectures.empty() ? config.model_type : config.architectures.front();
    if (wrapper) {
      read_wrapper(json, source, refusal, config);
    } else {
      try {
        HFConfig names = config;
        config.family = detect_family(names, source);
        config.norm = config.family == ModelFamily::GptOss ? NormStyle::ScaleWide : NormStyle::ScaleAfterCast;
      } catch (const std::runtime_error&) {
        config.norm = NormStyle::Unknown;  // an architecture dflow does not know: its norm neither
      }
      read_head_facts(json, "", source, /*mlp_width_optional=*/false, config);
    }
    check_mask_token(config, source);
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

}  // namespace dflow::target
