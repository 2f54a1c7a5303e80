#pragma once
// Typed, validated reading of one YAML mapping. Every read records the key as
// known; finish() refuses the keys nobody read, naming the closest known one.
// Errors carry file:line:column (or the --set text) and the full key path.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/errors.hpp"

namespace dflow::config {

// Where each value came from: the file for parsed nodes, the override text for
// values replaced by --set (those have no line/column).
struct Origins {
  std::string file;
  std::map<std::string, std::string> overrides;  // key path -> "--set k=v"
  // Every key path of the configuration ("run.max_steps", "model.drafter"),
  // so that a key put in the wrong section is pointed to the right one.
  std::vector<std::string> all_key_paths;
};

class YamlSection {
 public:
  YamlSection(YAML::Node node, std::string path, std::shared_ptr<const Origins> origins);

  // Optional key: leaves `out` (the default) when absent.
  template <class T>
  YamlSection& read(const std::string& key, T& out);
  // Nested mapping; an absent key gives an empty section.
  YamlSection section(const std::string& key);
  // The raw node (marks the key as known); may be undefined.
  YAML::Node raw(const std::string& key);
  bool has(const std::string& key) const;

  // Throws ConfigError for the first unread key.
  void finish() const;
  // The keys not read so far, as a mapping of their own (each key and value
  // keeps its mark), now counted as read: a section whose other keys another
  // reader declares (model.drafter: the drafter kind's params).
  YAML::Node take_unread();
  // The keys among `names` as a section of their own (errors still name this
  // section's path and lines), each marked read here: one reader's share of
  // a section others read too.
  YamlSection only(const std::vector<std::string>& names);

  // An error at `key` (or at this section when key is empty).
  ConfigError error(const std::string& key, const std::string& message) const;
  void require(bool ok, const std::string& key, const std::string& message) const {
    if (!ok) throw error(key, message);
  }

  // A section for an element of a list read from this section (same origins).
  YamlSection child(YAML::Node node, const std::string& path) const { return YamlSection(std::move(node), path, origins_); }
  const std::shared_ptr<const Origins>& origins() const { return origins_; }
  const std::string& path() const { return path_; }
  SourceMark mark_of(const std::string& key) const;
  const YAML::Node& node() const { return node_; }

 private:
  std::string suggestion(const std::string& key) const;
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  YAML::Node node_;
  std::string path_;
  std::shared_ptr<const Origins> origins_;
  std::vector<std::string> known_;
};

// Converts a scalar/sequence node to T, or throws with "expected <type>, got '...'".
template <class T>
T convert_value(const YAML::Node& node, const SourceMark& mark, const std::string& key_path);

SourceMark mark_for(const YAML::Node& node, const std::string& key_path, const Origins& origins);

}  // namespace dflow::config
