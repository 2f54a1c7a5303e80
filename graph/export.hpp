#pragma once
// Exports of a declared (described) pipeline, for `dflow graph --format dot|json`.
// Both work from describe() alone: no node body is built, no model loaded.
#include <nlohmann/json.hpp>

#include <string>

#include "graph/description.hpp"
#include "graph/telemetry.hpp"

namespace dflow::graph {

// Graphviz: nodes labelled "name / type xW", edges with their capacity,
// token edges dashed (with their initial tokens), routed and ordered marked.
std::string to_dot(const GraphDescription& graph);

// {"nodes": [...], "edges": [...]} plus "telemetry" when a snapshot is given.
nlohmann::json to_json(const GraphDescription& graph, const TelemetrySnapshot* telemetry = nullptr);

}  // namespace dflow::graph
