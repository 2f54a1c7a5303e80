#include "config/pipeline.hpp"

namespace dflow::config {

PipelineConfig parse_pipeline(YamlSection section) {
  PipelineConfig out;
  out.origins = section.origins();
  YAML::Node nodes = section.raw("nodes");
  YAML::Node edges = section.raw("edges");
  section.finish();
  section.require(nodes && nodes.IsSequence() && nodes.size() > 0, "nodes", "expected a non-empty list of nodes");
  section.require(edges && edges.IsSequence(), "edges", "expected a list of edges");
  for (size_t i = 0; i < nodes.size(); ++i) {
    YamlSection n = section.child(nodes[i], section.path() + ".nodes[" + std::to_string(i) + "]");
    NodeDecl d;
    d.mark = mark_for(nodes[i], n.path(), *out.origins);
    n.read("name", d.name).read("type", d.type).read("replicas", d.replicas);
    d.params = n.raw("params");
    d.params_mark = d.params ? mark_for(d.params, n.path() + ".params", *out.origins) : d.mark;
    n.finish();
    n.require(!d.name.empty(), "name", "every node needs a name");
    n.require(!d.type.empty(), "type", "node '" + d.name + "' needs a type");
    n.require(d.replicas >= 1, "replicas", "must be >= 1");
    out.nodes.push_back(std::move(d));
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    YamlSection e = section.child(edges[i], section.path() + ".edges[" + std::to_string(i) + "]");
    EdgeDecl d;
    d.mark = mark_for(edges[i], e.path(), *out.origins);
    e.read("from", d.from).read("to", d.to).read("capacity", d.capacity).read("token", d.token).read("initial", d.initial);
    e.finish();
    e.require(!d.from.empty(), "from", "every edge needs 'from'");
    e.require(!d.to.empty(), "to", "every edge needs 'to'");
    e.require(d.capacity >= 1, "capacity", "every edge is bounded: capacity must be >= 1");
    e.require(d.initial >= 0 && d.initial <= d.capacity, "initial", "initial tokens must lie in [0, capacity]");
    e.require(d.initial == 0 || d.token, "initial", "only a token edge (token: true) starts with tokens");
    out.edges.push_back(std::move(d));
  }
  return out;
}

}  // namespace dflow::config
