#include "config/yaml_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

namespace dflow::config {

SourceMark mark_for(const YAML::Node& node, const std::string& key_path, const Origins& origins) {
  // An overridden key, or anything below one, points at the --set text (the
  // most specific one: a node's overridden type inside an overridden pipeline).
  const std::string* best = nullptr;
  size_t best_length = 0;
  for (const auto& [path, text] : origins.overrides) {
    if ((key_path == path || key_path.rfind(path + ".", 0) == 0) && path.size() >= best_length)
      best = &text, best_length = path.size();
  }
  if (best) return SourceMark{*best, 0, 0};
  if (node && node.Mark().line >= 0) return SourceMark{origins.file, node.Mark().line + 1, node.Mark().column + 1};
  return SourceMark{origins.file, 0, 0};
}

YamlSection::YamlSection(YAML::Node node, std::string path, std::shared_ptr<const Origins> origins)
    : node_(std::move(node)), path_(std::move(path)), origins_(std::move(origins)) {
  if (node_ && !node_.IsNull() && !node_.IsMap())
    throw ConfigError(mark_for(node_, path_, *origins_), path_, "expected a mapping of keys");
}

bool YamlSection::has(const std::string& key) const { return node_ && node_.IsMap() && node_[key]; }

YAML::Node YamlSection::raw(const std::string& key) {
  known_.push_back(key);
  if (!node_ || !node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  return node_[key];
}

YAML::Node YamlSection::take_unread() {
  YAML::Node out(YAML::NodeType::Map);
  if (!node_ || !node_.IsMap()) return out;
  std::vector<std::string> taken;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!it->first.IsScalar()) continue;  // finish() refuses it, with its mark
    const std::string& key = it->first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    out.force_insert(it->first, it->second);
    taken.push_back(key);
  }
  known_.insert(known_.end(), taken.begin(), taken.end());
  return out;
}

YamlSection YamlSection::only(const std::vector<std::string>& names) {
  YAML::Node out(YAML::NodeType::Map);
  if (node_ && node_.IsMap()) {
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.IsScalar() && std::find(names.begin(), names.end(), it->first.Scalar()) != names.end())
        out.force_insert(it->first, it->second);
  }
  known_.insert(known_.end(), names.begin(), names.end());  // known: a typo of one gets a suggestion
  return YamlSection(out, path_, origins_);
}

SourceMark YamlSection::mark_of(const std::string& key) const {
  if (has(key)) {
    // Point at the key itself for unknown keys; at the value otherwise.
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return mark_for(it->first, key_path(key), *origins_);
  }
  return mark_for(node_, path_, *origins_);
}

ConfigError YamlSection::error(const std::string& key, const std::string& message) const {
  SourceMark mark = key.empty() ? mark_for(node_, path_, *origins_) : mark_of(key);
  if (has(key)) mark = mark_for(node_[key], key_path(key), *origins_);
  return ConfigError(mark, key.empty() ? path_ : key_path(key), message);
}

YamlSection YamlSection::section(const std::string& key) {
  return YamlSection(raw(key), key_path(key), origins_);
}

std::string YamlSection::suggestion(const std::string& key) const {
  auto best = closest_match(key, known_);
  if (!best.empty()) return ", did you mean '" + key_path(best) + "'?";
  // A key put in the wrong section (train.max_steps for run.max_steps).
  for (const auto& path : origins_->all_key_paths)
    if (path.substr(path.rfind('.') + 1) == key && path != key_path(key)) return ", did you mean '" + path + "'?";
  return {};
}

void YamlSection::finish() const {
  if (!node_ || !node_.IsMap()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    // YAML allows a list or a mapping as a key (`[a]: 1`, `? {a: 1}`); no
    // dflow key is one, and yaml-cpp's as<std::string>() would throw without a mark.
    if (!it->first.IsScalar()) {
      const std::string got = it->first.IsSequence() ? "a list" : it->first.IsMap() ? "a mapping" : "nothing";
      throw ConfigError(mark_for(it->first, path_, *origins_), path_, "expected a key name, got " + got);
    }
    const std::string& key = it->first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    throw ConfigError(mark_for(it->first, key_path(key), *origins_), "",
                      "unknown key '" + key_path(key) + "'" + suggestion(key));
  }
}

namespace {
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true/false)";
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else return "a string";
}

[[noreturn]] void type_error(const YAML::Node& node, const SourceMark& mark, const std::string& key_path,
                             const std::string& expected) {
  std::string got = node.IsScalar() ? "'" + node.Scalar() + "'" : node.IsSequence() ? "a list" : node.IsMap() ? "a mapping" : "nothing";
  throw ConfigError(mark, key_path, "expected " + expected + ", got " + got);
}

template <class T>
T scalar(const YAML::Node& node, const SourceMark& mark, const std::string& key_path) {
  if (!node.IsScalar()) type_error(node, mark, key_path, type_name<T>());
  const std::string& s = node.Scalar();
  if constexpr (std::is_same_v<T, std::string>) {
    return s;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (s == "true" || s == "True" || s == "yes") return true;
    if (s == "false" || s == "False" || s == "no") return false;
    type_error(node, mark, key_path, type_name<T>());
  } else if constexpr (std::is_integral_v<T>) {
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) type_error(node, mark, key_path, type_name<T>());
    return v;
  } else {
    try {
      size_t used = 0;
      double v = std::stod(s, &used);
      if (used != s.size() || !std::isfinite(v)) type_error(node, mark, key_path, type_name<T>());
      return static_cast<T>(v);
    } catch (const std::logic_error&) {
      type_error(node, mark, key_path, type_name<T>());
    }
  }
}

template <class T> struct is_vector : std::false_type {};
template <class T> struct is_vector<std::vector<T>> : std::true_type {};
}  // namespace

template <class T>
T convert_value(const YAML::Node& node, const SourceMark& mark, const std::string& key_path) {
  if constexpr (is_vector<T>::value) {
    using E = typename T::value_type;
    if (node.IsScalar()) return T{scalar<E>(node, mark, key_path)};  // a single value is a list of one
    if (!node.IsSequence()) type_error(node, mark, key_path, std::string("a list of ") + type_name<E>() + "s");
    T out;
    for (size_t i = 0; i < node.size(); ++i) out.push_back(scalar<E>(node[i], mark, key_path + "[" + std::to_string(i) + "]"));
    return out;
  } else {
    return scalar<T>(node, mark, key_path);
  }
}

template <class T>
YamlSection& YamlSection::read(const std::string& key, T& out) {
  YAML::Node n = raw(key);
  if (!n) return *this;
  out = convert_value<T>(n, mark_for(n, key_path(key), *origins_), key_path(key));
  return *this;
}

#define DFLOW_INSTANTIATE(T)                                                                  \
  template T convert_value<T>(const YAML::Node&, const SourceMark&, const std::string&); \
  template YamlSection& YamlSection::read<T>(const std::string&, T&);
DFLOW_INSTANTIATE(bool)
DFLOW_INSTANTIATE(int)
DFLOW_INSTANTIATE(int64_t)
DFLOW_INSTANTIATE(uint64_t)
DFLOW_INSTANTIATE(double)
DFLOW_INSTANTIATE(std::string)
DFLOW_INSTANTIATE(std::vector<int>)
DFLOW_INSTANTIATE(std::vector<int64_t>)
DFLOW_INSTANTIATE(std::vector<double>)
DFLOW_INSTANTIATE(std::vector<std::string>)
#undef DFLOW_INSTANTIATE

}  // namespace dflow::config
