#pragma once
// The end-of-run table of where time went: per node (calls, busy, busy share,
// longest call) and per edge (capacity, mean and high-water occupancy,
// producer-blocked and consumer-starved time), aligned for a terminal.
#include <nlohmann/json.hpp>

#include <string>

namespace dflow::report {

// telemetry: graph::to_json(TelemetrySnapshot). A replicated node has one row
// per replica ("target[1]"); a routed edge one row per replica's edge.
std::string summary_table(const nlohmann::json& telemetry);

}  // namespace dflow::report
