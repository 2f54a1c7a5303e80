#include "config/pipeline_override.hpp"

#include <vector>

#include "config/errors.hpp"

namespace dflow::config {

namespace {

constexpr const char* kNodes = "pipeline.nodes.";
constexpr const char* kEdges = "pipeline.edges.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t dot = s.find('.'); dot != std::string::npos; dot = s.find('.', begin)) {
    out.push_back(s.substr(begin, dot - begin));
    begin = dot + 1;
  }
  out.push_back(s.substr(begin));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "did you mean 'x'?" when one is close, else the whole list.
std::string closest_or_all(const std::string& word, const std::vector<std::string>& known, const char* what) {
  std::string hint = did_you_mean(word, known);
  return hint.empty() ? "; " + std::string(what) + ": " + joined(known) : hint;
}

std::string scalar_or_empty(const YAML::Node& node) {
  return node && node.IsScalar() ? node.Scalar() : std::string{};
}

YAML::Node list_of(YAML::Node pipeline, const char* key, const std::string& text) {
  YAML::Node list = pipeline[key];
  if (!list.IsSequence())
    throw ConfigError(SourceMark{"--set " + text}, std::string("pipeline.") + key,
                      "the pipeline has no list of " + std::string(key) + " to address by name");
  return list;
}

void set_node(YAML::Node pipeline, const std::string& key, const YAML::Node& value, const std::string& text,
              Origins& origins) {
  const SourceMark at{"--set " + text};
  const NodeKey parsed = *parse_node_key(key);
  if (parsed.node.empty() || parsed.field.empty())
    throw ConfigError(at, key, "expected pipeline.nodes.<name>.type, .replicas or .params.<key>");
  // parts: name, field[, params keys...]
  std::vector<std::string> parts{parsed.node, parsed.field};
  parts.insert(parts.end(), parsed.below.begin(), parsed.below.end());
  YAML::Node nodes = list_of(pipeline, "nodes", text);
  std::vector<std::string> names;
  size_t index = nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i) {
    names.push_back(scalar_or_empty(nodes[i]["name"]));
    if (names.back() == parts[0]) index = i;
  }
  if (index == nodes.size())
    throw ConfigError(at, key, "no node named '" + parts[0] + "' in the pipeline" + closest_or_all(parts[0], names, "nodes"));
  const std::string field = parts[1];
  const std::string path = "pipeline.nodes[" + std::to_string(index) + "]." + field;
  YAML::Node node = nodes[index];
  if (field == "name")
    throw ConfigError(at, key, "a node's name cannot be set: edges refer to it; declare the pipeline in the file instead");
  if (field == "type" || field == "replicas") {
    if (parts.size() != 2) throw ConfigError(at, key, "'" + field + "' has no keys below it");
    node[field] = value;
    origins.overrides[path] = "--set " + text;
    return;
  }
  if (field != "params")
    throw ConfigError(at, key, "a node has no key '" + field + "'" +
                                   closest_or_all(field, {"type", "replicas", "params"}, "keys --set takes"));
  // params, or a key below it: walk (creating mappings) with fresh handles,
  // since yaml-cpp's operator[] on a non-const node inserts.
  std::vector<YAML::Node> chain{node};
  std::string walked = "pipeline.nodes." + parts[0];
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    walked += "." + parts[i];
    if (parts[i + 1].empty()) throw ConfigError(at, key, "empty key after '" + walked + "'");
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap())
      throw ConfigError(at, key, "'" + walked + "' is a value, not a mapping of keys");
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
  std::string full_path = "pipeline.nodes[" + std::to_string(index) + "]";
  for (size_t i = 1; i < parts.size(); ++i) full_path += "." + parts[i];
  origins.overrides[full_path] = "--set " + text;
}

// "reorder" matches "reorder" and "reorder.<port>".
bool endpoint_matches(const std::string& declared, const std::string& written) {
  if (declared == written) return true;
  return written.find('.') == std::string::npos && declared.substr(0, declared.find('.')) == written;
}

void set_edge(YAML::Node pipeline, const std::string& key, const YAML::Node& value, const std::string& text,
              Origins& origins) {
  const SourceMark at{"--set " + text};
  const std::string rest = key.substr(std::string(kEdges).size());
  const size_t arrow = rest.find("->");
  const size_t last_dot = rest.rfind('.');
  if (arrow == std::string::npos) {
    // `--set pipeline.edges.a->b.capacity=4` unquoted: the shell took '>' as a
    // redirection and passed "pipeline.edges.a-".
    const bool cut = !rest.empty() && rest.back() == '-';
    throw ConfigError(at, key, cut ? "the edge lost its '>': quote the whole --set argument ('pipeline.edges.<from>-><to>.capacity=N'), "
                                     "the shell reads an unquoted '>' as a redirection"
                                   : "expected pipeline.edges.<from>-><to>.capacity");
  }
  if (last_dot == std::string::npos || last_dot < arrow)
    throw ConfigError(at, key, "expected pipeline.edges.<from>-><to>.capacity");
  const std::string from = rest.substr(0, arrow);
  const std::string to = rest.substr(arrow + 2, last_dot - arrow - 2);
  const std::string field = rest.substr(last_dot + 1);
  YAML::Node edges = list_of(pipeline, "edges", text);
  std::vector<std::string> declared;
  std::vector<size_t> matches;
  for (size_t i = 0; i < edges.size(); ++i) {
    const std::string f = scalar_or_empty(edges[i]["from"]), t = scalar_or_empty(edges[i]["to"]);
    declared.push_back(f + "->" + t);
    if (endpoint_matches(f, from) && endpoint_matches(t, to)) matches.push_back(i);
  }
  if (matches.empty())
    throw ConfigError(at, key, "no edge " + from + "->" + to + " in the pipeline" +
                                   closest_or_all(from + "->" + to, declared, "edges"));
  if (matches.size() > 1) {
    std::vector<std::string> which;
    for (size_t i : matches) which.push_back(declared[i]);
    throw ConfigError(at, key, from + "->" + to + " names " + std::to_string(matches.size()) + " edges (" + joined(which) +
                                   "): write their ports as declared");
  }
  if (field != "capacity")
    throw ConfigError(at, key, "an edge's 'capacity' is the key --set takes by its ends, not '" + field + "'" +
                                   did_you_mean(field, {"capacity"}));
  edges[matches.front()]["capacity"] = value;
  origins.overrides["pipeline.edges[" + std::to_string(matches.front()) + "].capacity"] = "--set " + text;
}

}  // namespace

std::optional<NodeKey> parse_node_key(const std::string& key) {
  if (!starts_with(key, kNodes)) return std::nullopt;
  const std::vector<std::string> parts = split_dots(key.substr(std::string(kNodes).size()));
  NodeKey out{parts[0], parts.size() > 1 ? parts[1] : "", {}};
  if (parts.size() > 2) out.below.assign(parts.begin() + 2, parts.end());
  return out;
}

bool pipeline_is_edited_default(const Origins& origins) {
  auto it = origins.overrides.find("pipeline");
  return it != origins.overrides.end() && it->second == kDefaultPipelineOrigin;
}

std::optional<std::string> override_text(const Origins& origins, const std::string& key_path) {
  // mark_for picks the most specific override; without one it names the file.
  const SourceMark mark = mark_for(YAML::Node(), key_path, origins);
  if (mark.file == origins.file) return std::nullopt;
  return mark.file;
}

bool is_pipeline_override(const std::string& key) {
  return (starts_with(key, kNodes) && key.size() > std::string(kNodes).size()) ||
         (starts_with(key, kEdges) && key.size() > std::string(kEdges).size());
}

void apply_pipeline_override(YAML::Node pipeline, const std::string& key, const YAML::Node& value,
                             const std::string& text, Origins& origins) {
  if (starts_with(key, kNodes)) set_node(pipeline, key, value, text, origins);
  else set_edge(pipeline, key, value, text, origins);
}

}  // namespace dflow::config
