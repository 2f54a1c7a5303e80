#include "report/compare_fairness.hpp"

#include <algorithm>

namespace dflow::report {

namespace {

constexpr const char* kDefault = "(default)";

std::string value_or_default(const FlatConfig& config, const std::string& key) {
  auto it = config.find(key);
  return it == config.end() ? kDefault : it->second;
}

std::string joined_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

}  // namespace

std::optional<std::map<std::string, std::string>> loss_definition(const RunSummary& run) {
  if (!run.config || !run.terms.unknown.empty()) return std::nullopt;
  std::map<std::string, std::string> out = run.terms.loss;
  for (const char* key : kLossRunKeys) out[key] = value_or_default(run.config->values, key);
  return out;
}

std::optional<std::map<std::string, std::string>> tau_definition(const RunSummary& run) {
  if (!run.config || !run.terms.unknown.empty()) return std::nullopt;
  return run.terms.tau;
}

std::string why_not_comparable(const std::vector<std::optional<std::map<std::string, std::string>>>& defs,
                               const std::vector<std::string>& names, const std::vector<std::string>& unknown_because) {
  std::vector<std::string> unknown, because;
  for (size_t i = 0; i < defs.size(); ++i)
    if (!defs[i]) {
      unknown.push_back(names[i]);
      if (i < unknown_because.size() && !unknown_because[i].empty()) because.push_back(names[i] + ": " + unknown_because[i]);
    }
  if (!unknown.empty()) {
    if (!because.empty()) return "what the figures of " + joined_names(unknown) + " mean is unknown (" + joined_names(because) + ")";
    return joined_names(unknown) + (unknown.size() == 1 ? " has" : " have") +
           " no resolved config yet (it is saved with each checkpoint), so what its figures mean is unknown";
  }
  std::vector<std::string> keys;  // every key of any definition, sorted
  for (const auto& d : defs)
    for (const auto& [key, value] : *d)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  std::string why;  // every key that differs, "; " between them
  for (const auto& key : keys) {
    // Distinct values in first-seen order, with the runs that have each.
    std::vector<std::pair<std::string, std::vector<std::string>>> values;
    for (size_t i = 0; i < defs.size(); ++i) {
      auto it = defs[i]->find(key);
      const std::string value = it == defs[i]->end() ? kAbsent : it->second;
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
