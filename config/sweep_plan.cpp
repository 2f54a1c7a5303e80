#include "config/sweep_plan.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "config/errors.hpp"
#include "config/pipeline_override.hpp"

namespace dflow::config {

namespace {

ConfigError vary_error(const std::string& text, const std::string& message) {
  return ConfigError(SourceMark{"--vary " + text}, "", message);
}

// Letters, digits and . _ - = + survive in a directory name; brackets,
// braces, quotes and spaces go; anything else becomes '_'.
std::string name_part(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-') out += ch;
    else if (ch == '[' || ch == ']' || ch == '{' || ch == '}' || ch == '"' || ch == '\'' || ch == ' ') continue;
    else out += '_';
  }
  return out.empty() ? "_" : out;
}

std::string short_label(const std::string& key) {
  const std::string edges = "pipeline.edges.";
  if (const auto node = parse_node_key(key)) {  // <name>.type | <name>.replicas | <name>.params.<k>
    if (node->field == "type" && node->below.empty()) return node->node;
    std::string label = node->node;
    if (node->field != "params" || node->below.empty()) label += "." + node->field;
    for (const auto& k : node->below) label += "." + k;
    return label;
  }
  if (key.rfind(edges, 0) == 0) {
    std::string rest = key.substr(edges.size());
    const auto arrow = rest.find("->");
    if (arrow != std::string::npos) rest.erase(arrow + 1, 1);  // "->" becomes "-"
    return rest;
  }
  return key.substr(key.rfind('.') + 1);
}

// The keys each variant's run gets from the sweep: its seed (--seeds) and where it writes.
void refuse_sweep_owned_key(const std::string& key, const std::string& where) {
  if (key == "run.seed") throw ConfigError(SourceMark{where}, "", "run.seed is the sweep's: vary the seed with --seeds N");
  if (key == "run.out_dir" || key == "run.name")
    throw ConfigError(SourceMark{where}, "", key + " is the sweep's: each variant's run.out_dir and run.name are the "
                                              "sweep's (--out/NAME and NAME)");
}

}  // namespace

SweepAxis parse_vary(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw vary_error(text, "expected KEY=v1,v2,... (any key --set takes)");
  SweepAxis axis{text.substr(0, eq), {}, {}};
  std::string current;
  int depth = 0;
  char quote = 0;
  for (char ch : text.substr(eq + 1)) {
    if (quote) {
      if (ch == quote) quote = 0;
    } else if (ch == '"' || ch == '\'') {
      quote = ch;
    } else if (ch == '[' || ch == '{') {
      ++depth;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    } else if (ch == ',' && depth == 0) {
      axis.values.push_back(current);
      current.clear();
      continue;
    }
    current += ch;
  }
  axis.values.push_back(current);
  for (auto& v : axis.values) {
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of(' ') + 1);
    if (v.empty()) throw vary_error(text, "an empty value in the list: give each value once, separated by ','");
  }
  std::set<std::string> seen;
  for (const auto& v : axis.values)
    if (!seen.insert(v).second) throw vary_error(text, "'" + v + "' is given twice");
  return axis;
}

void add_named_variant(SweepAxis& axis, const std::string& text) {
  const auto at = [&](const std::string& message) { return ConfigError(SourceMark{"--variant " + text}, "", message); };
  const auto colon = text.find(':');
  std::string name = text.substr(0, colon);
  name.erase(name.find_last_not_of(' ') + 1);
  // A plain directory name: "." and ".." would put the run in --out itself or its parent.
  if (name.empty() || name_part(name) != name || name.find_first_not_of('.') == std::string::npos)
    throw at("expected NAME: KEY=VALUE ..., NAME in letters, digits, '.', '_' and '-', not only dots (it names the run "
             "directory)");
  if (std::find(axis.values.begin(), axis.values.end(), name) != axis.values.end()) throw at("the name '" + name + "' is given twice");
  std::vector<std::string> sets;
  std::string current;
  int depth = 0;
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  for (size_t i = 0; i <= rest.size(); ++i) {
    const char ch = i < rest.size() ? rest[i] : ' ';
    if (ch == '[' || ch == '{') ++depth;
    if ((ch == ']' || ch == '}') && depth > 0) --depth;
    if (ch == ' ' && depth == 0) {
      if (!current.empty()) sets.push_back(current);
      current.clear();
      continue;
    }
    current += ch;
  }
  for (const auto& kv : sets)
    if (kv.find('=') == std::string::npos || kv.front() == '=') throw at("'" + kv + "' is no KEY=VALUE");
  axis.key = "variant";
  axis.values.push_back(name);
  axis.sets.push_back(sets);
}

void refuse_sweep_owned_sets(const std::vector<std::string>& sets) {
  for (const auto& kv : sets) {
    const std::string key = kv.substr(0, kv.find('='));
    if (key != "run.seed") refuse_sweep_owned_key(key, "--set " + kv);
  }
}

std::string axis_label(const std::string& key, const std::vector<std::string>& all_keys) {
  const std::string label = short_label(key);
  for (const auto& other : all_keys)
    if (other != key && short_label(other) == label) return key;
  return label;
}

std::vector<SweepVariant> sweep_variants(const std::vector<SweepAxis>& axes, int seeds, uint64_t first_seed) {
  if (seeds < 1) throw ConfigError("--seeds: must be >= 1, got " + std::to_string(seeds));
  std::vector<std::string> keys;
  for (const auto& a : axes) {
    if (std::find(keys.begin(), keys.end(), a.key) != keys.end())
      throw ConfigError(SourceMark{"--vary " + a.key}, "", "the key is varied twice: give all its values in one --vary");
    if (a.sets.empty()) refuse_sweep_owned_key(a.key, "--vary " + a.key);
    for (size_t i = 0; i < a.sets.size(); ++i)
      for (const auto& kv : a.sets[i]) refuse_sweep_owned_key(kv.substr(0, kv.find('=')), "--variant " + a.values[i]);
    keys.push_back(a.key);
  }
  std::vector<SweepVariant> out;
  std::vector<size_t> index(axes.size(), 0);  // an odometer, the last axis fastest
  while (true) {
    for (int s = 0; s < seeds; ++s) {
      SweepVariant v;
      v.seed = first_seed + static_cast<uint64_t>(s);
      for (size_t a = 0; a < axes.size(); ++a) {
        const std::string& value = axes[a].values[index[a]];
        v.name += v.name.empty() ? "" : "+";
        if (!axes[a].sets.empty()) {  // named variants: the name alone says it
          const auto& sets = axes[a].sets[index[a]];
          v.overrides.insert(v.overrides.end(), sets.begin(), sets.end());
          v.name += value;
          continue;
        }
        v.overrides.push_back(axes[a].key + "=" + value);
        v.name += name_part(axis_label(axes[a].key, keys)) + "=" + name_part(value);
      }
      if (seeds > 1) v.name += (v.name.empty() ? "" : "+") + std::string("seed=") + std::to_string(v.seed);
      if (v.name.empty()) v.name = "base";
      v.overrides.push_back("run.seed=" + std::to_string(v.seed));
      out.push_back(std::move(v));
    }
    size_t a = axes.size();
    while (a > 0 && ++index[a - 1] == axes[a - 1].values.size()) index[--a] = 0;
    if (a == 0) break;
  }
  // Values that differ only in characters a name drops ("[a]" and "a") would collide.
  std::set<std::string> names;
  for (size_t i = 0; i < out.size(); ++i)
    if (!names.insert(out[i].name).second) out[i].name += "-" + std::to_string(i), names.insert(out[i].name);
  return out;
}

}  // namespace dflow::config
