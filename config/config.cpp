#include "config/config.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "config/config_keys.hpp"
#include "config/pipeline_override.hpp"
#include "config/validate.hpp"

namespace dflow::config {

namespace {

// Applies "a.b.c=value" to the YAML tree before typed reading, so that an
// override is type-checked exactly like a value from the file.
void apply_override(YAML::Node root, const std::string& text, Origins& origins) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(SourceMark{"--set " + text}, "", "expected section.key=value");
  std::string path = text.substr(0, eq);
  std::string value = text.substr(eq + 1);
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) keys.push_back(k);
  if (keys.size() < 2) throw ConfigError(SourceMark{"--set " + text}, path, "expected section.key=value");
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception&) {
    parsed = YAML::Node(value);
  }
  if (!parsed || parsed.IsNull()) parsed = YAML::Node(value);
  if (is_pipeline_override(path)) {
    if (!root["pipeline"]) {
      // No pipeline section: the override edits the default graph, which
      // stays the default one (its errors say so, not a line of this file).
      root["pipeline"] = YAML::Clone(YAML::Load(default_config_yaml())["pipeline"]);
      origins.overrides["pipeline"] = kDefaultPipelineOrigin;
    }
    apply_pipeline_override(root["pipeline"], path, parsed, text, origins);
    return;
  }
  // Walk with fresh handles: yaml-cpp's operator[] on a non-const node inserts.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = chain.back()[keys[i]];
    if (next.IsDefined() && !next.IsMap() && !next.IsNull())
      throw ConfigError(SourceMark{"--set " + text}, path, "'" + keys[i] + "' is not a section");
    chain.push_back(next);
  }
  chain.back()[keys.back()] = parsed;
  origins.overrides[path] = "--set " + text;
}

// Every key path of the configuration and its nested sections
// ("model.drafter"), from the declared keys, for "did you mean".
const std::vector<std::string>& all_key_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    for (const auto& k : config_keys().keys()) {
      for (auto dot = k.path.find('.', k.path.find('.') + 1); dot != std::string::npos; dot = k.path.find('.', dot + 1))
        if (std::find(out.begin(), out.end(), k.path.substr(0, dot)) == out.end()) out.push_back(k.path.substr(0, dot));
      out.push_back(k.path);
    }
    return out;
  }();
  return paths;
}

}  // namespace

Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides) {
  auto origins = std::make_shared<Origins>();
  origins->file = source_name;
  origins->all_key_paths = all_key_paths();
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(SourceMark{source_name, e.mark.line + 1, e.mark.column + 1}, "", "YAML syntax error: " + e.msg);
  }
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError(SourceMark{source_name, 1, 1}, "", "expected a mapping of sections (run, model, data, ...)");
  for (const auto& o : overrides) apply_override(root, o, *origins);
  Config config = read_config(YamlSection(root, "", origins));
  config.source = source_name;
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return load_config_text(default_config_yaml(), "<default>", overrides);
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open config file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return load_config_text(buffer.str(), path, overrides);
}

}  // namespace dflow::config
