#pragma once
// Prometheus text exposition (format 0.0.4) of the newest step record and
// graph telemetry, for the live server's /metrics.
#include <nlohmann/json.hpp>

#include <string>

namespace dflow::report {

// last_record: a "kind": "step" record (null or {} when none yet);
// telemetry: graph::to_json(TelemetrySnapshot) (null when none). Metrics are
// named dflow_*; edges are labelled edge="...", nodes node="..." and
// replica="...". Non-finite values are written NaN, +Inf, -Inf.
std::string to_prometheus(const nlohmann::json& last_record, const nlohmann::json& telemetry);

}  // namespace dflow::report
