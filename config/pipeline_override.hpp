#pragma once
// `--set` of the pipeline by names, for experiments without editing YAML:
//   pipeline.nodes.<name>.type=<type>
//   pipeline.nodes.<name>.replicas=<n>
//   pipeline.nodes.<name>.params.<key>[.<key>...]=<value>   (or .params={k: v})
//   pipeline.edges.<from>-><to>.capacity=<n>
// <from> and <to> are written as in the edge's declaration ("accumulate.step");
// a node name alone matches its edge when only one edge joins the two nodes.
// The override edits the YAML tree before typed reading, so the value is
// type-checked (and its errors located at the --set text) like the file's.
#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "config/yaml_reader.hpp"

namespace dflow::config {

// A key that addresses a node by name, in its parts:
// pipeline.nodes.<node>.<field>[.<key>...] ("target", "params", {"objective"}).
// Missing parts are empty ("pipeline.nodes.target": no field). The one
// reading of such keys: --set, a sweep's labels.
struct NodeKey {
  std::string node;
  std::string field;               // type, replicas, params (or what was written)
  std::vector<std::string> below;  // the keys below the field (params.<k>.<k2>)
};
// Nullopt for a key that does not start with pipeline.nodes.
std::optional<NodeKey> parse_node_key(const std::string& key);

// True for a key that addresses a node or an edge by name (as above), false
// for every other key (pipeline.nodes=[...] replaces the list as a whole).
bool is_pipeline_override(const std::string& key);

// Applies `key`=`value` (parsed YAML) to `pipeline`, the mapping with `nodes`
// and `edges`, and records where the value came from (`text`, the whole
// --set argument) under the key path the reader uses (pipeline.nodes[3].type).
// Throws ConfigError at `text` for an unknown node, edge or field, naming the
// closest ones.
void apply_pipeline_override(YAML::Node pipeline, const std::string& key, const YAML::Node& value,
                             const std::string& text, Origins& origins);

// The origin recorded for a pipeline that --set edited when the file declared
// none: the default graph's, which stays the default one.
inline constexpr const char* kDefaultPipelineOrigin = "<default pipeline>";
bool pipeline_is_edited_default(const Origins& origins);

// The --set text that gave `key_path` (or a section above it) its value.
std::optional<std::string> override_text(const Origins& origins, const std::string& key_path);

}  // namespace dflow::config
