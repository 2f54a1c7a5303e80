#include "report/compare_fairness.hpp"

#include <algorithm>
#include <iterator>

namespace dflow::report {

namespace {

constexpr const char* kDefault = "(default)";

std::string value_or_default(const FlatConfig& config, const std::string& key) {
  auto it = config.find(key);
  return it == config.end() ? kDefault : it->second;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The declared nodes' names whose type starts with `type_prefix` ("drafter_step").
std::vector<std::string> nodes_of_type(const FlatConfig& config, const std::string& type_prefix) {
  std::vector<std::string> names;
  const std::string nodes = "pipeline.nodes.";
  for (const auto& [key, value] : config) {
    if (!starts_with(key, nodes) || key.size() < 5 || key.compare(key.size() - 5, 5, ".type") != 0) continue;
    if (starts_with(value, type_prefix)) names.push_back(key.substr(nodes.size(), key.size() - nodes.size() - 5));
  }
  return names;
}

bool loss_neutral(const std::string& param) {
  return std::any_of(std::begin(kLossNeutralParams), std::end(kLossNeutralParams),
                     [&](const char* p) { return param == p || starts_with(param, std::string(p) + "."); });
}

std::string joined_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

}  // namespace

std::map<std::string, std::string> loss_definition(const FlatConfig& config) {
  std::map<std::string, std::string> out;
  out["model.drafter.block_size"] = value_or_default(config, "model.drafter.block_size");
  out["train.loss_decay_gamma"] = value_or_default(config, "train.loss_decay_gamma");
  for (const auto& node : nodes_of_type(config, "drafter_step")) {
    const std::string prefix = "pipeline.nodes." + node + ".";
    out[prefix + "type"] = value_or_default(config, prefix + "type");
    for (const auto& [key, value] : config)
      if (starts_with(key, prefix + "params.") && !loss_neutral(key.substr(prefix.size() + 7))) out[key] = value;
  }
  return out;
}

std::map<std::string, std::string> tau_definition(const FlatConfig& config) {
  std::map<std::string, std::string> out;
  const auto eval_nodes = nodes_of_type(config, "eval.");
  if (eval_nodes.empty()) return out;
  out["model.target.path"] = value_or_default(config, "model.target.path");
  for (const auto& node : eval_nodes) {
    const std::string prefix = "pipeline.nodes." + node + ".";
    out[prefix + "type"] = value_or_default(config, prefix + "type");
    // The node's params, each defaulting to the run's eval section.
    for (const char* setting : {"prompts", "max_prompts", "max_new_tokens", "temperature"}) {
      const std::string own = prefix + "params." + setting;
      out["eval." + std::string(setting)] =
          config.count(own) ? config.at(own) : value_or_default(config, "eval." + std::string(setting));
    }
  }
  return out;
}

std::string why_not_comparable(const std::vector<const FlatConfig*>& configs, const std::vector<std::string>& names,
                               std::map<std::string, std::string> (*definition)(const FlatConfig&)) {
  std::vector<std::string> unknown;
  for (size_t i = 0; i < configs.size(); ++i)
    if (!configs[i]) unknown.push_back(names[i]);
  if (!unknown.empty())
    return joined_names(unknown) + (unknown.size() == 1 ? " has" : " have") +
           " no resolved config yet (it is saved with each checkpoint), so what its figures mean is unknown";
  std::vector<std::map<std::string, std::string>> defs;
  for (const auto* c : configs) defs.push_back(definition(*c));
  std::vector<std::string> keys;  // every key of any definition, in order
  for (const auto& d : defs)
    for (const auto& [key, value] : d)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  std::string why;  // every key that differs, "; " between them
  for (const auto& key : keys) {
    // Distinct values in first-seen order, with the runs that have each.
    std::vector<std::pair<std::string, std::vector<std::string>>> values;
    for (size_t i = 0; i < defs.size(); ++i) {
      auto it = defs[i].find(key);
      const std::string value = it == defs[i].end() ? kAbsent : it->second;
      auto same = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == value; });
      if (same == values.end()) values.push_back({value, {names[i]}});
      else same->second.push_back(names[i]);
    }
    if (values.size() < 2) continue;
    why += (why.empty() ? "" : "; ") + key + " is ";
    for (size_t v = 0; v < values.size(); ++v)
      why += (v == 0 ? "" : " and ") + values[v].first + " in " + joined_names(values[v].second);
  }
  return why;
}

FlatConfig variant_key(const FlatConfig& config) {
  FlatConfig out = config;
  for (const char* key : {"run.seed", "run.name", "run.out_dir"}) out.erase(key);
  return out;
}

}  // namespace dflow::report
