#pragma once
// The DSpark confidence head's calibration in the report: of the newest eval
// record that carries "confidence_calibration" ([{"position", "verified",
// "predicted", "observed"}], written by eval.tau), a table per block
// position of predicted against observed acceptance.
#include <nlohmann/json.hpp>

#include <string>

#include "report/run_data.hpp"

namespace dflow::report {

// {"node", "global_step", "mean_tau", "rows"} of that record; null when no eval record has one.
nlohmann::json latest_calibration(const RunData& run);
// An HTML section (empty string for null).
std::string calibration_html(const nlohmann::json& calibration);
// Plain text lines for the text report (empty string for null).
std::string calibration_text(const nlohmann::json& calibration);

}  // namespace dflow::report
