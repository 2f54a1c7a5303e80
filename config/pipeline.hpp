#pragma once
// The `pipeline:` section as declared: nodes and edges with their source marks.
// The graph builder (graph/builder.hpp) turns this into a running flow graph.
#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <vector>

#include "config/errors.hpp"
#include "config/yaml_reader.hpp"

namespace dflow::config {

struct NodeDecl {
  std::string name;
  std::string type;      // registry key, e.g. "route.least_loaded"
  int replicas = 1;      // parallel instances (e.g. one target worker per device)
  YAML::Node params;     // node-specific parameters, validated by the node's schema
  SourceMark mark;       // where the node was declared
  SourceMark params_mark;
};

struct EdgeDecl {
  std::string from;       // "node" or "node.port"
  std::string to;         // "node" or "node.port"
  int capacity = 0;       // bounded: > 0; per replica for an edge into replicas
  bool token = false;     // a token edge closes a declared token cycle
  int initial = 0;        // tokens placed on this edge at start (token edges)
  SourceMark mark;
};

struct PipelineConfig {
  std::vector<NodeDecl> nodes;
  std::vector<EdgeDecl> edges;
  bool from_default = false;  // true when the section was absent and the default graph is used
  std::shared_ptr<const Origins> origins;  // for node-parameter errors
};

// Parses a `pipeline:` mapping; syntax errors only (names are the builder's job).
PipelineConfig parse_pipeline(YamlSection section);

}  // namespace dflow::config
