#include <yaml-cpp/yaml.h>

#include <charconv>

#include "config/config.hpp"
#include "config/config_keys.hpp"

namespace dflow::config {

namespace {
void emit_pipeline(YAML::Emitter& out, const PipelineConfig& p) {
  out << YAML::Key << "pipeline" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const auto& n : p.nodes) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << n.name << YAML::Key << "type"
        << YAML::Value << n.type;
    if (n.replicas != 1) out << YAML::Key << "replicas" << YAML::Value << n.replicas;
    if (n.params && !n.params.IsNull()) out << YAML::Key << "params" << YAML::Value << n.params;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "edges" << YAML::Value << YAML::BeginSeq;
  for (const auto& e : p.edges) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "from" << YAML::Value << e.from << YAML::Key << "to"
        << YAML::Value << e.to << YAML::Key << "capacity" << YAML::Value << e.capacity;
    if (e.token) out << YAML::Key << "token" << YAML::Value << true;
    if (e.initial) out << YAML::Key << "initial" << YAML::Value << e.initial;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}
}  // namespace

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::BeginMap;
  config_keys().emit(out, c);
  if (!c.faults.empty()) {
    out << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
    for (const auto& f : c.faults) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value << f.kind << YAML::Key << "node"
          << YAML::Value << f.node << YAML::Key << "step" << YAML::Value << f.step << YAML::Key << "factor"
          << YAML::Value;
      emit_value(out, f.factor);
      out << YAML::Key << "seconds" << YAML::Value;
      emit_value(out, f.seconds);
      out << YAML::Key << "rank" << YAML::Value << f.rank << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  emit_pipeline(out, c.pipeline);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dflow::config
