// Reading Hugging Face's tokenizer.json into a Tokenizer::Spec.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/errors.hpp"
#include "text/byte_level.hpp"
#include "text/tokenizer_spec.hpp"

namespace dflow::text {
namespace {

using nlohmann::json;

// GPT-2's split regex, used by a ByteLevel pre-tokenizer with use_regex: true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr const char* kSupported = "dflow reads byte-level BPE tokenizers (Qwen2/Qwen2.5/Qwen3, Llama 3, gpt-oss)";

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw ConfigError(fmt::format("{}: {}; {}", file.string(), what, kSupported));
}

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string() ? node["type"].get<std::string>()
                                                                               : node.dump().substr(0, 60);
}

bool flag(const json& node, const char* key, bool fallback) {
  return node.contains(key) && node[key].is_boolean() ? node[key].get<bool>() : fallback;
}

std::string to_bytes(const std::filesystem::path& file, const std::string& token, const char* where) {
  auto bytes = byte_level_to_bytes(token);
  if (!bytes) {
    refuse(file, fmt::format("{} token {} is not in the byte-level alphabet (not a byte-level BPE vocabulary)",
                             where, json(token).dump()));
  }
  return std::move(*bytes);
}

void read_normalizer(const json& node, Tokenizer::Spec& spec) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence" && node.contains("normalizers")) {
    for (const json& inner : node["normalizers"]) read_normalizer(inner, spec);
  } else {
    refuse(spec.file, fmt::format("normalizer type '{}' is not supported (only NFC)", type));
  }
}

void read_byte_level(const json& node, Tokenizer::Spec& spec) {
  if (flag(node, "add_prefix_space", false)) refuse(spec.file, "ByteLevel with add_prefix_space: true is not supported");
  if (flag(node, "use_regex", true)) {
    if (spec.split_pattern) refuse(spec.file, "a Split and a ByteLevel with use_regex: true is not supported");
    spec.split_pattern = kGpt2Pattern;
  }
}

void read_pre_tokenizer(const json& node, Tokenizer::Spec& spec) {
  const std::string type = type_of(node);
  std::vector<json> steps;
  if (type == "Sequence" && node.contains("pretokenizers")) {
    steps.assign(node["pretokenizers"].begin(), node["pretokenizers"].end());
  } else {
    steps.push_back(node);
  }
  bool byte_level = false;
  for (const json& step : steps) {
    const std::string step_type = type_of(step);
    if (step_type == "Split") {
      const json& pattern = step.value("pattern", json());
      if (!pattern.contains("Regex") || spec.split_pattern || byte_level) {
        refuse(spec.file, "pre_tokenizer Split must come first, once, with a Regex pattern");
      }
      if (step.value("behavior", "") != "Isolated" || flag(step, "invert", false)) {
        refuse(spec.file, fmt::format("pre_tokenizer Split with behavior '{}' is not supported (only Isolated)",
                                      step.value("behavior", "")));
      }
      spec.split_pattern = pattern["Regex"].get<std::string>();
    } else if (step_type == "ByteLevel") {
      read_byte_level(step, spec);
      byte_level = true;
    } else {
      refuse(spec.file, fmt::format("pre_tokenizer type '{}' is not supported", step_type));
    }
  }
  if (!byte_level) refuse(spec.file, "the pre_tokenizer has no ByteLevel step (not a byte-level tokenizer)");
}

// Ids index a dense table: one far beyond the number of tokens would make it
// huge ({"a": 1073741824} is 2^30 entries) for nothing. A few reserved holes
// are fine.
constexpr int64_t kReservedIds = 65536;

int64_t id_limit(const json& root) {
  const json& model = root.at("model");
  const size_t vocab = model.contains("vocab") ? model["vocab"].size() : 0;
  const size_t added = root.contains("added_tokens") ? root["added_tokens"].size() : 0;
  return static_cast<int64_t>(vocab + added) + kReservedIds;
}

void check_id(const Tokenizer::Spec& spec, const json& id, const std::string& token, const char* where,
              int64_t limit) {
  // get<int64_t>() of a float out of range is undefined behaviour, and of 2^64 - 1 is -1: integers only, compared
  // unsigned when they are.
  const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(limit)
                                                : id.is_number_integer() && id.get<int64_t>() >= 0 &&
                                                      id.get<int64_t>() < limit;
  if (!in_range) {
    refuse(spec.file, fmt::format("{} token {} has id {}, not an integer in [0, {}) (the number of tokens plus {} "
                                  "reserved ids; beyond, the vocabulary would be left sparse)",
                                  where, json(token).dump(), id.dump(), limit, kReservedIds));
  }
}

void read_model(const json& model, int64_t limit, Tokenizer::Spec& spec) {
  const std::string type = type_of(model);
  if (type != "BPE") refuse(spec.file, fmt::format("tokenizer model type '{}' is not supported", type));
  if (flag(model, "byte_fallback", false)) refuse(spec.file, "BPE with byte_fallback: true is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      refuse(spec.file, fmt::format("BPE with a {} is not supported", key));
    }
  }
  spec.ignore_merges = flag(model, "ignore_merges", false);
  const json& vocab = model.value("vocab", json::object());
  for (const auto& [token, id_value] : vocab.items()) {
    check_id(spec, id_value, token, "vocab", limit);
    const int64_t id = id_value.get<int64_t>();
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(static_cast<size_t>(id) + 1);
    spec.vocab[static_cast<size_t>(id)] = to_bytes(spec.file, token, "vocab");
  }
  const json& merges = model.value("merges", json::array());
  spec.merges.reserve(merges.size());
  for (const json& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {  // older files: "left right"
      const std::string text = merge.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos) refuse(spec.file, fmt::format("merge {} has no space", merge.dump()));
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      left = merge.at(0).get<std::string>();
      right = merge.at(1).get<std::string>();
    }
    spec.merges.emplace_back(to_bytes(spec.file, left, "merge"), to_bytes(spec.file, right, "merge"));
  }
}

// An added token's content and flags, as tokenizer.json's added_tokens and
// tokenizer_config.json's added_tokens_decoder write them (its id aside).
AddedToken added_token(const json& node, const std::filesystem::path& file) {
  AddedToken token;
  token.content = node.at("content").get<std::string>();
  token.special = flag(node, "special", false);
  token.normalized = flag(node, "normalized", !token.special);
  for (const char* key : {"lstrip", "rstrip", "single_word"}) {
    if (flag(node, key, false)) {
      refuse(file, fmt::format("added token {} has {}: true, which dflow does not implement",
                               json(token.content).dump(), key));
    }
  }
  return token;
}

void read_added_tokens(const json& list, int64_t limit, Tokenizer::Spec& spec) {
  for (const json& node : list) {
    AddedToken token = added_token(node, spec.file);
    // get<int32_t>() would wrap 2^32 + 300 to 300: checked first.
    const json& id = node.at("id");
    check_id(spec, id, token.content, "added", limit);
    token.id = id.get<int32_t>();
    spec.added_tokens.push_back(std::move(token));
  }
}

// transformers also adds the tokens of tokenizer_config.json's
// added_tokens_decoder that tokenizer.json lacks (Qwen3.5/3.6 list their audio
// and TTS tokens only there), in id order, each at the id `tokenizers` gives
// it: its vocabulary id when the text is a token, else the next one.
void read_config_added_tokens(const std::filesystem::path& file, Tokenizer::Spec& spec) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return;
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    const json root = json::parse(buffer.str());
    if (!root.is_object() || !root.contains("added_tokens_decoder")) return;
    std::vector<std::pair<int64_t, const json*>> listed;
    for (const auto& [key, node] : root.at("added_tokens_decoder").items()) {
      int64_t id = -1;
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (error != std::errc() || end != key.data() + key.size() || id < 0) {
        refuse(file, fmt::format("added_tokens_decoder key {} is not a token id", json(key).dump()));
      }
      listed.emplace_back(id, &node);
    }
    std::sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int64_t next = static_cast<int64_t>(spec.vocab.size());
    for (const auto& token : spec.added_tokens) next = std::max<int64_t>(next, int64_t{token.id} + 1);
    for (const auto& [declared, node] : listed) {
      AddedToken token = added_token(*node, file);
      const auto same = [&](const AddedToken& t) { return t.content == token.content; };
      if (std::any_of(spec.added_tokens.begin(), spec.added_tokens.end(), same)) continue;
      const auto in_vocab = std::find(spec.vocab.begin(), spec.vocab.end(), token.content);
      const int64_t id = in_vocab != spec.vocab.end() ? in_vocab - spec.vocab.begin() : next++;
      if (id != declared) {
        refuse(file, fmt::format("added_tokens_decoder lists {} at id {}, which {} lacks; transformers would add it "
                                 "at id {}, so the two files disagree",
                                 json(token.content).dump(), declared, spec.file.filename().string(), id));
      }
      token.id = static_cast<int32_t>(id);
      spec.added_tokens.push_back(std::move(token));
    }
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: not a Hugging Face tokenizer_config.json: {}", file.string(), e.what()));
  }
}

}  // namespace

Tokenizer::Spec read_tokenizer_spec(const std::filesystem::path& path) {
  Tokenizer::Spec spec;
  spec.file = std::filesystem::is_directory(path) ? path / "tokenizer.json" : path;
  std::ifstream in(spec.file, std::ios::binary);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open the tokenizer; a target directory holds its tokenizer.json",
                                  spec.file.string()));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  json root;
  try {
    root = json::parse(buffer.str());
    const int64_t limit = id_limit(root);
    read_model(root.at("model"), limit, spec);
    read_normalizer(root.value("normalizer", json()), spec);
    if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null()) {
      refuse(spec.file, "there is no pre_tokenizer (not a byte-level tokenizer)");
    }
    read_pre_tokenizer(root["pre_tokenizer"], spec);
    read_added_tokens(root.value("added_tokens", json::array()), limit, spec);
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: not a Hugging Face tokenizer.json: {}", spec.file.string(), e.what()));
  }
  read_config_added_tokens(spec.file.parent_path() / "tokenizer_config.json", spec);
  return spec;
}

}  // namespace dflow::text
