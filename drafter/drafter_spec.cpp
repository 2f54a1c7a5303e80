// DrafterSpec: built from the target config, validated, and mapped to and
// from the config.json of an exported drafter.
#include <algorithm>
#include <optional>
#include <tuple>
#include <stdexcept>

#include "config/log.hpp"
#include "drafter/drafter.hpp"
#include "drafter/kind.hpp"
#include "target/target.hpp"

namespace dflow::drafter {

namespace {
std::invalid_argument spec_error(const std::string& what) {
  return std::invalid_argument("drafter spec: " + what);
}

constexpr const char* kFullAttention = "full_attention";
// The draft MLP's width per unit of hidden width when the target has no
// dense MLP to copy: SpecForge's Qwen3.5-35B-A3B DFlash config (6144 / 2048).
constexpr int64_t kMlpWidthPerHidden = 3;
constexpr const char* kSlidingAttention = "sliding_attention";

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}
}  // namespace

void DrafterSpec::validate() const {
  if (hidden_size <= 0 || num_attention_heads <= 0 || num_key_value_heads <= 0 || intermediate_size <= 0 ||
      vocab_size <= 0) {
    throw spec_error("hidden_size, heads, kv heads, intermediate_size and vocab_size must be positive");
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    throw spec_error("num_attention_heads " + std::to_string(num_attention_heads) +
                     " is not a multiple of num_key_value_heads " + std::to_string(num_key_value_heads));
  }
  if (head_dim <= 0 || head_dim % 2 != 0) throw spec_error("head_dim must be positive and even, got " + std::to_string(head_dim));
  if (num_layers < 1) throw spec_error("num_layers must be >= 1, got " + std::to_string(num_layers));
  if (block_size < 2) throw spec_error("block_size must be >= 2 (slot 0 holds the anchor token), got " + std::to_string(block_size));
  if (target_layer_ids.empty()) throw spec_error("target_layer_ids is empty");
  for (const int64_t id : target_layer_ids) {
    if (id < 0 || id >= num_target_layers) {
      throw spec_error("target layer id " + std::to_string(id) + " outside the target's " +
                       std::to_string(num_target_layers) + " layers");
    }
  }
  if (mask_token_id < 0 || mask_token_id >= vocab_size) {
    throw spec_error("mask_token_id " + std::to_string(mask_token_id) + " is not a row of the target embedding (vocab " +
                     std::to_string(vocab_size) + ")");
  }
  validate_layer_types();
  try {
    drafter_kind(kind).validate(kind_fields);
  } catch (const std::invalid_argument& e) {
    throw spec_error(e.what());
  }
}

void DrafterSpec::validate_layer_types() const {
  if (!layer_types.empty() && static_cast<int64_t>(layer_types.size()) != num_layers) {
    throw spec_error("layer_types has " + std::to_string(layer_types.size()) + " entries for " +
                     std::to_string(num_layers) + " draft layers");
  }
  for (const std::string& type : layer_types) {
    if (type != kFullAttention && type != kSlidingAttention)
      throw spec_error("layer type '" + type + "' is neither full_attention nor sliding_attention");
  }
  if (any_sliding() && sliding_window < block_size) {
    throw spec_error("sliding layers need a sliding_window of at least block_size (" + std::to_string(block_size) +
                     "), got " + std::to_string(sliding_window));
  }
  if (!any_sliding() && sliding_window != 0) {
    throw spec_error("sliding_window " + std::to_string(sliding_window) + " without a sliding_attention layer");
  }
}

int64_t DrafterSpec::layer_window(int64_t layer) const {
  const bool slides = layer >= 0 && layer < static_cast<int64_t>(layer_types.size()) &&
                      layer_types[static_cast<size_t>(layer)] == kSlidingAttention;
  return slides ? sliding_window : 0;
}

bool DrafterSpec::any_sliding() const {
  return std::find(layer_types.begin(), layer_types.end(), kSlidingAttention) != layer_types.end();
}

DrafterSpec make_drafter_spec(const target::HFConfig& target, const DrafterOptions& options) {
  DrafterSpec spec;
  spec.hidden_size = target.hidden_size;
  spec.num_attention_heads = target.num_attention_heads;
  spec.num_key_value_heads = target.num_key_value_heads;
  spec.head_dim = target.head_dim;
  spec.intermediate_size = options.intermediate_size > 0 ? options.intermediate_size : target.intermediate_size;
  if (spec.intermediate_size <= 0) {
    spec.intermediate_size = kMlpWidthPerHidden * target.hidden_size;
    log::info("model", log::str("drafter MLP width ", spec.intermediate_size, ": the target's config has no dense "
                                "intermediate_size (a mixture of experts' text config), so the draft layers take ",
                                kMlpWidthPerHidden, " x hidden_size ", target.hidden_size, ", the ratio of SpecForge's "
                                "Qwen3.5-35B-A3B drafter (6144 at hidden 2048); set model.drafter.intermediate_size "
                                "to choose"));
  }
  spec.vocab_size = target.vocab_size;
  spec.max_position_embeddings = target.max_position_embeddings;
  spec.rms_norm_eps = target.rms_norm_eps;
  spec.rope_theta = target.rope_theta;
  spec.attention_bias = false;  // draft layers are Qwen3 layers, bias-free like the public checkpoints
  spec.num_layers = options.num_layers;
  spec.block_size = options.block_size;
  spec.num_target_layers = target.num_hidden_layers;
  spec.layer_types = options.layer_types;
  spec.sliding_window = options.sliding_window;
  spec.kind = options.kind;
  spec.kind_fields = options.kind_fields;
  if (!options.target_layer_ids.empty()) {
    spec.target_layer_ids = options.target_layer_ids;
  } else {
    const int64_t features = options.num_target_features > 0 ? options.num_target_features : options.num_layers;
    spec.target_layer_ids = target::distinct_feature_layer_ids(target.num_hidden_layers, features);
    const auto formula = target::feature_layer_ids(target.num_hidden_layers, features);
    if (spec.target_layer_ids != formula)
      log::info("model", log::str("feature layers: the default formula gives ", ids_text(formula), " for a ",
                                  target.num_hidden_layers, "-layer target, which repeats a layer; using ",
                                  ids_text(spec.target_layer_ids), " (set model.drafter.target_layer_ids to choose)"));
  }
  if (options.mask_token_id) {
    spec.mask_token_id = *options.mask_token_id;
  } else if (target.mask_token_id) {
    spec.mask_token_id = *target.mask_token_id;
  } else {
    throw spec_error("no mask token id: set the drafter's mask_token_id, or dflow_mask_token_id in the target's "
                     "config.json (it must be a row of the target embedding)");
  }
  spec.validate();
  return spec;
}

nlohmann::json drafter_config_json(const DrafterSpec& spec, torch::Dtype dtype) {
  std::string dtype_name = "float32";
  if (dtype == torch::kBFloat16) dtype_name = "bfloat16";
  if (dtype == torch::kFloat16) dtype_name = "float16";
  if (dtype == torch::kFloat64) dtype_name = "float64";
  nlohmann::json config = {
      {"architectures", {drafter_kind(spec.kind).architecture()}},
      {"model_type", "qwen3"},
      {"hidden_size", spec.hidden_size},
      {"intermediate_size", spec.intermediate_size},
      {"num_hidden_layers", spec.num_layers},
      {"num_attention_heads", spec.num_attention_heads},
      {"num_key_value_heads", spec.num_key_value_heads},
      {"head_dim", spec.head_dim},
      {"vocab_size", spec.vocab_size},
      {"max_position_embeddings", spec.max_position_embeddings},
      {"rms_norm_eps", spec.rms_norm_eps},
      {"rope_theta", spec.rope_theta},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"attention_bias", spec.attention_bias},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"tie_word_embeddings", false},
      {"torch_dtype", dtype_name},
      {"block_size", spec.block_size},
      {"num_target_layers", spec.num_target_layers},
      {"dflash_config", {{"mask_token_id", spec.mask_token_id}, {"target_layer_ids", spec.target_layer_ids}}},
  };
  if (!spec.layer_types.empty()) config["layer_types"] = spec.layer_types;
  // The kind's own fields (none for DFlash, whose config stays what it
  // was, byte for byte).
  config.update(drafter_kind(spec.kind).config_fields(spec.kind_fields));
  if (spec.any_sliding()) {
    // Hugging Face's Qwen3Config drops sliding_window unless
    // use_sliding_window is true. The public loaders (z-lab's model.py,
    // SGLang, vLLM, SpecForge) make a sliding layer causal within its block
    // unless is_causal says otherwise; dflow's blocks are bidirectional.
    config["use_sliding_window"] = true;
    config["sliding_window"] = spec.sliding_window;
    config["is_causal"] = false;
  }
  return config;
}

namespace {

// layer_types and sliding_window as the public loaders read them: explicit
// layer_types, else Hugging Face's Qwen3 rule (with use_sliding_window,
// layers from max_window_layers on slide). Refuses a block that would be
// causal in those loaders (is_causal, then dflash_config.causal, then
// sliding layers by default): dflow trains and drafts whole blocks.
void read_attention_layout(const nlohmann::json& config, DrafterSpec& spec, const std::string& source) {
  auto error = [&](const std::string& what) { return std::runtime_error("drafter config '" + source + "': " + what); };
  const bool use_sliding_window = config.contains("use_sliding_window") && config["use_sliding_window"].is_boolean() &&
                                  config["use_sliding_window"].get<bool>();
  if (config.contains("layer_types") && !config["layer_types"].is_null()) {
    if (!config["layer_types"].is_array()) throw error("layer_types must be a list of strings");
    for (const auto& type : config["layer_types"]) {
      if (!type.is_string()) throw error("layer_types must be a list of strings, got " + config["layer_types"].dump());
      spec.layer_types.push_back(type.get<std::string>());
    }
  } else if (use_sliding_window) {
    const bool given = config.contains("max_window_layers") && config["max_window_layers"].is_number_integer();
    const int64_t first_sliding = given ? config["max_window_layers"].get<int64_t>() : 28;  // Qwen3Config's default
    for (int64_t layer = 0; layer < spec.num_layers; ++layer)
      spec.layer_types.push_back(layer >= first_sliding ? kSlidingAttention : kFullAttention);
  }
  if (spec.any_sliding()) {
    if (!config.contains("sliding_window") || !config["sliding_window"].is_number_integer())
      throw error("layer_types has sliding_attention layers but sliding_window is missing or not an integer");
    spec.sliding_window = config["sliding_window"].get<int64_t>();
  }
  std::optional<bool> causal;
  if (config.contains("is_causal") && config["is_causal"].is_boolean()) {
    causal = config["is_causal"].get<bool>();
  } else if (config.contains("dflash_config") && config["dflash_config"].is_object() &&
             config["dflash_config"].contains("causal") && config["dflash_config"]["causal"].is_boolean()) {
    causal = config["dflash_config"]["causal"].get<bool>();
  }
  if (causal.value_or(spec.any_sliding())) {
    throw error(std::string(causal ? "is_causal (or dflash_config.causal) is true"
                                   : "sliding_attention layers without \"is_causal\": false") +
                ": z-lab's model.py, SGLang and vLLM then attend causally within a block, which dflow does not "
                "implement (its blocks are bidirectional, as its exports say with \"is_causal\": false)");
  }
}

}  // namespace

DrafterSpec drafter_spec_from_config(const nlohmann::json& config, const std::string& source) {
  // A kind of its own architecture (DSpineDraftModel) is a DFlash drafter to the parser.
  nlohmann::json as_dflash = config;
  if (config.contains("architectures") && config["architectures"].is_array() && config["architectures"].size() == 1 &&
      config["architectures"][0].is_string()) {
    for (const auto& name : drafter_kind_names())
      if (config["architectures"][0].get<std::string>() == drafter_kind(name).architecture())
        as_dflash["architectures"] = nlohmann::json::array({"DFlashDraftModel"});
  }
  const target::HFConfig parsed = target::parse_hf_config(as_dflash, source);
  if (!parsed.is_dflash_drafter) {
    throw std::runtime_error("drafter config '" + source + "': architectures must be [\"DFlashDraftModel\"]");
  }
  auto required = [&](const nlohmann::json& json, const std::string& key) {
    if (!json.contains(key) || !json[key].is_number_integer()) {
      throw std::runtime_error("drafter config '" + source + "': missing or non-integer '" + key + "'");
    }
    return json[key].get<int64_t>();
  };
  DrafterSpec spec;
  spec.hidden_size = parsed.hidden_size;
  spec.num_attention_heads = parsed.num_attention_heads;
  spec.num_key_value_heads = parsed.num_key_value_heads;
  spec.head_dim = parsed.head_dim;
  spec.intermediate_size = parsed.intermediate_size;
  spec.vocab_size = parsed.vocab_size;
  spec.max_position_embeddings = parsed.max_position_embeddings;
  spec.rms_norm_eps = parsed.rms_norm_eps;
  spec.rope_theta = parsed.rope_theta;
  spec.attention_bias = parsed.attention_bias;
  spec.num_layers = parsed.num_hidden_layers;
  spec.block_size = required(config, "block_size");
  spec.num_target_layers = required(config, "num_target_layers");
  const nlohmann::json dflash = config.value("dflash_config", nlohmann::json::object());
  spec.mask_token_id = required(dflash, "mask_token_id");
  if (dflash.contains("target_layer_ids") && dflash["target_layer_ids"].is_array()) {
    spec.target_layer_ids = dflash["target_layer_ids"].get<std::vector<int64_t>>();
  } else {
    spec.target_layer_ids = target::feature_layer_ids(spec.num_target_layers, spec.num_layers);  // the public default
  }
  read_attention_layout(config, spec, source);
  std::tie(spec.kind, spec.kind_fields) = drafter_kind_of_config(config, source);
  try {
    spec.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("drafter config '" + source + "': " + e.what());
  }
  return spec;
}

}  // namespace dflow::drafter
