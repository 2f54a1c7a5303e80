#include "report/config_diff.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

namespace dflow::report {

namespace fs = std::filesystem;

namespace {

std::string yaml_text(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

std::string join(const std::string& prefix, const std::string& key) { return prefix.empty() ? key : prefix + "." + key; }

bool all_maps_with(const YAML::Node& seq, std::initializer_list<const char*> keys) {
  if (!seq.IsSequence() || seq.size() == 0) return false;
  for (const auto& item : seq) {
    if (!item.IsMap()) return false;
    for (const char* key : keys)
      if (!item[key] || !item[key].IsScalar()) return false;
  }
  return true;
}

void flatten(const YAML::Node& node, const std::string& prefix, FlatConfig& out);

// Pipeline nodes by name (replicas 1 when not written) and edges by their ends.
void flatten_named(const YAML::Node& seq, const std::string& prefix, bool edges, FlatConfig& out) {
  for (const auto& item : seq) {
    const std::string name = edges ? item["from"].Scalar() + "->" + item["to"].Scalar() : item["name"].Scalar();
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (edges ? key == "from" || key == "to" : key == "name") continue;
      flatten(it->second, join(prefix, name + "." + key), out);
    }
    if (!edges && item["type"] && !item["replicas"]) out[join(prefix, name + ".replicas")] = "1";
  }
}

void flatten(const YAML::Node& node, const std::string& prefix, FlatConfig& out) {
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) flatten(it->second, join(prefix, it->first.as<std::string>()), out);
  } else if (all_maps_with(node, {"from", "to"})) {
    flatten_named(node, prefix, /*edges=*/true, out);
  } else if (all_maps_with(node, {"name"})) {
    flatten_named(node, prefix, /*edges=*/false, out);
  } else {
    out[prefix] = yaml_text(node);
  }
}

// N of "step-N" or "best-step-N"; -1 for any other name.
int64_t checkpoint_step(const std::string& name) {
  std::string_view digits = name;
  if (digits.starts_with("best-")) digits.remove_prefix(5);
  if (!digits.starts_with("step-")) return -1;
  digits.remove_prefix(5);
  int64_t step = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

}  // namespace

FlatConfig flatten_config(const std::string& yaml_text) {
  FlatConfig out;
  try {
    flatten(YAML::Load(yaml_text), "", out);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(std::string("not a YAML config: ") + e.what());
  }
  return out;
}

std::optional<RunConfig> read_run_config(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> candidates;
  std::error_code error;
  for (fs::directory_iterator it(run_dir / "checkpoints", error), end; !error && it != end; it.increment(error))
    if (const int64_t step = checkpoint_step(it->path().filename().string()); step >= 0 && fs::is_regular_file(it->path() / "config.yaml"))
      candidates.emplace_back(step, it->path() / "config.yaml");
  if (candidates.empty()) return std::nullopt;
  const auto& newest = *std::max_element(candidates.begin(), candidates.end());
  std::ifstream in(newest.second);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return RunConfig{newest.second, flatten_config(text)};
  } catch (const std::exception& e) {
    throw std::runtime_error(newest.second.string() + ": " + e.what());
  }
}

std::vector<ConfigDifference> diff_configs(const std::vector<const FlatConfig*>& configs) {
  std::vector<ConfigDifference> out;
  if (std::count_if(configs.begin(), configs.end(), [](const FlatConfig* c) { return c != nullptr; }) < 2) return out;
  std::set<std::string> keys;
  for (const FlatConfig* config : configs)
    if (config)
      for (const auto& [key, value] : *config) keys.insert(key);
  for (const char* ignored : kIgnoredKeys) keys.erase(ignored);
  for (const std::string& key : keys) {
    ConfigDifference row{key, {}};
    std::set<std::string> seen;
    for (const FlatConfig* config : configs) {
      if (!config) {
        row.values.emplace_back(kUnknown);
        continue;
      }
      auto it = config->find(key);
      row.values.push_back(it == config->end() ? kAbsent : it->second);
      seen.insert(row.values.back());
    }
    if (seen.size() > 1) out.push_back(std::move(row));
  }
  return out;
}

}  // namespace dflow::report
