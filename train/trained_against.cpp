#include "train/trained_against.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "config/errors.hpp"
#include "data/checksum.hpp"
#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"
#include "target/hf_config.hpp"
#include "target/target_head.hpp"
#include "text/dataset_tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "train/feature_cache.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

namespace {

// Keys a copy of the same model may carry otherwise: how it is stored
// (dtype, quantization), who wrote it, and generation or runtime
// conveniences that do not change a forward pass.
const std::set<std::string>& ignored_config_keys() {
  static const std::set<std::string> keys = {
      "_name_or_path", "_commit_hash", "transformers_version",                     // who wrote it
      "torch_dtype", "dtype", "quantization_config", "compression_config",         // how it is stored
      "use_cache", "auto_map", "attn_implementation", "_attn_implementation",      // runtime choices
      "output_attentions", "output_hidden_states", "return_dict", "initializer_range"};
  return keys;
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The values rounded to bfloat16 (a bfloat16 copy of a float32 checkpoint
// digests alike) and the shape.
std::string tensor_digest(const torch::Tensor& tensor) {
  const torch::Tensor values = tensor.to(torch::kBFloat16).contiguous();
  uint64_t h = data::xxhash64(values.data_ptr(), static_cast<size_t>(values.nbytes()));
  for (const int64_t size : values.sizes()) h = data::hash_combine(h, static_cast<uint64_t>(size));
  return hex(h) + " " + c10::str(values.sizes());
}

const nlohmann::json* field(const nlohmann::json& config, const char* key) {
  if (config.contains(key)) return &config[key];
  if (config.contains("text_config") && config["text_config"].is_object() && config["text_config"].contains(key))
    return &config["text_config"][key];
  return nullptr;
}

std::string quantization_of(const nlohmann::json& config) {
  const nlohmann::json* q = field(config, "quantization_config");
  if (!q || !q->is_object()) return "none";
  std::string out = q->value("quant_method", std::string("unnamed"));
  std::vector<std::string> details;
  if (q->contains("fmt") && (*q)["fmt"].is_string()) details.push_back((*q)["fmt"].get<std::string>());
  if (q->contains("format") && (*q)["format"].is_string()) details.push_back((*q)["format"].get<std::string>());
  if (q->contains("weight_block_size") && (*q)["weight_block_size"].is_array()) {
    std::string block;
    for (const auto& v : (*q)["weight_block_size"]) block += (block.empty() ? "" : "x") + v.dump();
    details.push_back("block " + block);
  }
  for (size_t i = 0; i < details.size(); ++i) out += (i == 0 ? " (" : ", ") + details[i] + (i + 1 == details.size() ? ")" : "");
  return out;
}

std::string string_at(const nlohmann::json& json, const char* key, const std::string& where) {
  if (!json.contains(key) || !json[key].is_string())
    throw ConfigError(where + ": field '" + key + "' is missing or not a string");
  return json[key].get<std::string>();
}

// Config fields, one level down into text_config: "num_hidden_layers",
// "text_config.hidden_size".
std::map<std::string, std::string> flat_fields(const nlohmann::json& config) {
  std::map<std::string, std::string> out;
  if (!config.is_object()) return out;
  for (const auto& [key, value] : config.items()) {
    if (key == "text_config" && value.is_object()) {
      for (const auto& [inner, v] : value.items()) out["text_config." + inner] = v.dump();
    } else {
      out[key] = value.dump();
    }
  }
  return out;
}

std::string shorten(const std::string& text, size_t most = 60) {
  return text.size() <= most ? text : text.substr(0, most - 3) + "...";
}

}  // namespace

nlohmann::json identity_config(nlohmann::json config) {
  if (!config.is_object()) return config;
  for (const auto& key : ignored_config_keys()) config.erase(key);
  if (config.contains("text_config") && config["text_config"].is_object())
    for (const auto& key : ignored_config_keys()) config["text_config"].erase(key);
  return config;
}

nlohmann::json TargetIdentity::to_json() const {
  return {{"path", path},       {"config", config},           {"embedding", embedding},
          {"lm_head", lm_head}, {"weights", weights},         {"checkpoint_dtype", checkpoint_dtype},
          {"quantization", quantization}, {"tokenizer", tokenizer}};
}

TargetIdentity TargetIdentity::from_json(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) throw ConfigError(where + ": 'target' is not an object");
  TargetIdentity t;
  t.path = string_at(json, "path", where + " target");
  if (!json.contains("config") || !json["config"].is_object())
    throw ConfigError(where + " target: field 'config' is missing or not an object");
  t.config = json["config"];
  t.embedding = string_at(json, "embedding", where + " target");
  t.lm_head = string_at(json, "lm_head", where + " target");
  t.weights = string_at(json, "weights", where + " target");
  t.checkpoint_dtype = string_at(json, "checkpoint_dtype", where + " target");
  t.quantization = string_at(json, "quantization", where + " target");
  t.tokenizer = string_at(json, "tokenizer", where + " target");
  return t;
}

TargetIdentity target_identity(const fs::path& target_dir) {
  TargetIdentity t;
  t.path = fs::absolute(target_dir).lexically_normal().string();
  const nlohmann::json config = target::read_json_file(target_dir / "config.json");
  t.config = identity_config(config);
  const nlohmann::json* dtype = field(config, "torch_dtype");
  if (!dtype) dtype = field(config, "dtype");
  t.checkpoint_dtype = dtype && dtype->is_string() ? dtype->get<std::string>() : "unstated";
  t.quantization = quantization_of(config);
  t.weights = weights_fingerprint(target_dir);

  std::vector<std::string> names;
  for (const auto& scheme : target::TargetHead::naming_schemes()) {
    names.push_back(scheme.embedding);
    names.push_back(scheme.lm_head);
  }
  t.embedding = t.lm_head = "absent";
  try {
    const formats::TensorMap tensors = formats::read_checkpoint_tensors(target_dir, names);
    for (const auto& scheme : target::TargetHead::naming_schemes()) {
      const auto embedding = tensors.find(scheme.embedding);
      if (embedding == tensors.end()) continue;
      t.embedding = tensor_digest(embedding->second);
      const auto head = tensors.find(scheme.lm_head);
      t.lm_head = head == tensors.end() ? "tied" : tensor_digest(head->second);
      break;
    }
  } catch (const std::exception& e) {  // a layout dflow does not read (an FP8 embedding): named, never fatal here
    t.embedding = t.lm_head = std::string("unreadable: ") + e.what();
  }

  t.tokenizer = "none";
  if (fs::exists(target_dir / "tokenizer.json")) {
    try {
      t.tokenizer = text::Tokenizer::load(target_dir / "tokenizer.json")->fingerprint();
    } catch (const std::exception& e) {
      t.tokenizer = std::string("unreadable: ") + e.what();
    }
  }
  return t;
}

nlohmann::json TrainedAgainst::to_json() const {
  nlohmann::json data_json = nlohmann::json::array();
  for (const auto& d : data)
    data_json.push_back({{"dir", d.dir}, {"tokenizer", d.tokenizer}, {"chat_template", d.chat_template}});
  std::vector<int64_t> hidden_states;
  for (const int64_t id : target_layer_ids) hidden_states.push_back(id + 1);
  return {{"format", "dflow trained_against"},
          {"version", version},
          {"target", target.to_json()},
          {"compute_dtype", compute_dtype},
          {"data", data_json},
          {"target_layer_ids", target_layer_ids},
          {"hidden_states_indices", hidden_states}};
}

TrainedAgainst TrainedAgainst::from_json(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) throw ConfigError(where + ": not a JSON object");
  TrainedAgainst r;
  if (!json.contains("version") || !json["version"].is_number_integer())
    throw ConfigError(where + ": field 'version' is missing or not an integer");
  r.version = json["version"].get<int>();
  if (r.version > kTrainedAgainstVersion)
    throw ConfigError(where + ": field 'version' is " + std::to_string(r.version) + ", written by a newer dflow (this one reads up to " +
                      std::to_string(kTrainedAgainstVersion) + "); use that dflow or a newer one");
  if (!json.contains("target")) throw ConfigError(where + ": field 'target' is missing");
  r.target = TargetIdentity::from_json(json["target"], where);
  r.compute_dtype = string_at(json, "compute_dtype", where);
  if (!json.contains("data") || !json["data"].is_array()) throw ConfigError(where + ": field 'data' is missing or not a list");
  for (const auto& d : json["data"]) {
    if (!d.is_object()) throw ConfigError(where + ": field 'data' holds a non-object");
    r.data.push_back({string_at(d, "dir", where + " data"), string_at(d, "tokenizer", where + " data"),
                      string_at(d, "chat_template", where + " data")});
  }
  try {
    r.target_layer_ids = json.at("target_layer_ids").get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(where + ": field 'target_layer_ids' is missing or not a list of integers");
  }
  return r;
}

TrainedAgainst trained_against(const fs::path& target_dir, const std::string& compute_dtype,
                               const std::vector<std::string>& data_dirs, const std::vector<int64_t>& layer_ids) {
  TrainedAgainst r;
  r.target = target_identity(target_dir);
  r.compute_dtype = compute_dtype;
  r.target_layer_ids = layer_ids;
  for (const auto& dir : data_dirs) {
    TrainedData d{dir, "", ""};
    const fs::path file = fs::path(dir) / text::kTokenizerFingerprintFile;
    if (fs::exists(file)) {
      try {
        std::ifstream in(file);
        const auto json = nlohmann::json::parse(in);
        d.tokenizer = json.value("fingerprint", std::string());
        d.chat_template = json.value("chat_template", std::string());
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(file.string() + ": unreadable (" + e.what() + "); prepare the dataset again");
      }
    }
    r.data.push_back(std::move(d));
  }
  return r;
}

std::optional<TrainedAgainst> read_trained_against(const fs::path& dir) {
  const fs::path file = dir / kTrainedAgainstFile;
  if (!fs::exists(file)) return std::nullopt;
  nlohmann::json json;
  try {
    std::ifstream in(file);
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": unreadable (" + e.what() + ")");
  }
  return TrainedAgainst::from_json(json, file.string());
}

void write_trained_against(const fs::path& dir, const TrainedAgainst& record) {
  formats::write_json_atomically(dir / kTrainedAgainstFile, record.to_json());
}

std::string TargetCheck::describe(const std::string& indent) const {
  std::string out = indent + summary;
  for (const auto& item : items) out += "\n" + indent + "  " + item;
  return out;
}

TargetCheck check_target(const TargetIdentity& recorded, const TargetIdentity& given) {
  TargetCheck check;
  bool model_differs = false, storage_differs = false;
  const auto before = flat_fields(recorded.config), now = flat_fields(given.config);
  std::set<std::string> keys;
  for (const auto& [k, _] : before) keys.insert(k);
  for (const auto& [k, _] : now) keys.insert(k);
  std::vector<std::string> config_items;
  for (const auto& key : keys) {
    const auto a = before.find(key), b = now.find(key);
    const std::string va = a == before.end() ? "(absent)" : a->second, vb = b == now.end() ? "(absent)" : b->second;
    if (va != vb) config_items.push_back("config.json " + key + ": trained " + shorten(va) + ", given " + shorten(vb));
  }
  constexpr size_t kMostConfigItems = 8;
  for (size_t i = 0; i < config_items.size() && i < kMostConfigItems; ++i) check.items.push_back(config_items[i]);
  if (config_items.size() > kMostConfigItems)
    check.items.push_back("and " + std::to_string(config_items.size() - kMostConfigItems) + " more config.json field(s)");
  model_differs = !config_items.empty();
  auto compare = [&](const char* what, const std::string& a, const std::string& b, bool& flag) {
    if (a == b) return;
    check.items.push_back(std::string(what) + ": trained " + a + ", given " + b);
    flag = true;
  };
  compare("embedding", recorded.embedding, given.embedding, model_differs);
  compare("LM head", recorded.lm_head, given.lm_head, model_differs);
  compare("tokenizer", recorded.tokenizer, given.tokenizer, model_differs);
  compare("quantization", recorded.quantization, given.quantization, storage_differs);
  compare("stored as", recorded.checkpoint_dtype, given.checkpoint_dtype, storage_differs);
  const bool weights_differ = recorded.weights != given.weights;
  if (weights_differ && !model_differs && !storage_differs)
    check.items.push_back("weights: trained " + recorded.weights + ", given " + given.weights);

  using V = TargetCheck::Verdict;
  if (model_differs) {
    check.verdict = V::other_target;
    check.summary = "another target than the drafter was trained against (" + recorded.path + "): the drafter reads "
                    "hidden states of another model and its drafts are judged by another LM head, so acceptance can "
                    "fall to nothing";
  } else if (!weights_differ) {
    check.verdict = V::same;
    check.summary = "the target the drafter was trained against" +
                    (given.path == recorded.path ? std::string() : " (same files, at " + given.path + ")");
  } else if (storage_differs) {
    check.verdict = V::same_model;
    const bool quantized = recorded.quantization != given.quantization;
    check.summary = std::string(quantized ? "a quantized copy" : "a copy in another dtype") +
                    " of the target the drafter was trained against (" + recorded.path + "): allowed; " +
                    (quantized ? "the quantized target's greedy tokens differ where its logits are close, so "
                                 "acceptance is typically a little lower than trained: measure it"
                               : "acceptance should match the trained one up to rounding");
  } else {
    check.verdict = V::other_weights;
    check.summary = "other weights of the same model than the drafter was trained against (" + recorded.path +
                    ": same shapes, embedding, LM head and tokenizer; another revision or fine-tune): the hidden "
                    "states the drafter reads differ, so acceptance drops by an amount only a measurement tells";
  }
  return check;
}

std::string describe(const TrainedAgainst& r, const std::string& indent) {
  const auto& t = r.target;
  auto num = [&](const char* key) {
    const nlohmann::json* v = field(t.config, key);
    return v ? v->dump() : std::string("?");
  };
  const nlohmann::json* type = field(t.config, "model_type");
  std::string layers, indices;
  for (const int64_t id : r.target_layer_ids) {
    layers += (layers.empty() ? "" : ", ") + std::to_string(id);
    indices += (indices.empty() ? "" : ", ") + std::to_string(id + 1);
  }
  std::string out;
  out += indent + "target     " + t.path + " (" + (type && type->is_string() ? type->get<std::string>() : "?") + ", " +
         num("num_hidden_layers") + " layers, hidden " + num("hidden_size") + ", vocab " + num("vocab_size") +
         "; stored " + t.checkpoint_dtype + ", quantization " + t.quantization + ")\n";
  out += indent + "weights    " + t.weights + "; embedding " + t.embedding + "; LM head " + t.lm_head + "\n";
  out += indent + "tokenizer  " + t.tokenizer + "\n";
  out += indent + "features   computed in " + r.compute_dtype + " from layers [" + layers + "] (Hugging Face hidden_states [" +
         indices + "])\n";
  for (const auto& d : r.data)
    out += indent + "data       " + d.dir + ": " +
           (d.chat_template.empty() ? std::string("token ids (no chat template recorded)")
                                    : "chat template " + d.chat_template + ", tokenizer " + d.tokenizer) +
           "\n";
  return out;
}

}  // namespace dflow::train
