#include "report/eval_calibration.hpp"

#include <iomanip>
#include <sstream>

#include "report/pipeline_svg.hpp"

namespace dflow::report {

namespace {
std::string number(const nlohmann::json& value, int digits) {
  if (!value.is_number()) return "-";
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value.get<double>();
  return out.str();
}
std::string integer(const nlohmann::json& value) {
  return value.is_number() ? std::to_string(value.get<int64_t>()) : "-";
}
}  // namespace

nlohmann::json latest_calibration(const RunData& run) {
  for (auto it = run.events.rbegin(); it != run.events.rend(); ++it) {
    const nlohmann::json& r = *it;
    if (r.value("kind", "") != "eval" || !r.contains("confidence_calibration") || !r["confidence_calibration"].is_array())
      continue;
    return {{"node", r.value("node", "eval")},
            {"global_step", r.contains("global_step") ? r["global_step"] : nlohmann::json()},
            {"mean_tau", r.contains("mean_tau") ? r["mean_tau"] : nlohmann::json()},
            {"rows", r["confidence_calibration"]}};
  }
  return nullptr;
}

std::string calibration_html(const nlohmann::json& c) {
  if (c.is_null()) return "";
  std::ostringstream out;
  out << "<section class=\"panel\" id=\"confidence-calibration\"><h2>Confidence head calibration</h2>"
      << "<p class=\"note\">" << escape_html(c.value("node", "eval")) << " at step " << integer(c["global_step"])
      << " (tau " << number(c["mean_tau"], 2) << "): per block position k, over the drafting cycles whose drafts "
         "1 .. k-1 were accepted, the head's mean predicted acceptance against the observed share accepted.</p>"
      << "<table class=\"calibration\"><thead><tr><th>position</th><th>verified</th><th>predicted</th>"
         "<th>observed</th></tr></thead><tbody>";
  for (const auto& row : c["rows"])
    out << "<tr><td>" << integer(row.value("position", nlohmann::json())) << "</td><td>"
        << integer(row.value("verified", nlohmann::json())) << "</td><td>"
        << number(row.value("predicted", nlohmann::json()), 3) << "</td><td>"
        << number(row.value("observed", nlohmann::json()), 3) << "</td></tr>";
  out << "</tbody></table></section>\n";
  return out.str();
}

std::string calibration_text(const nlohmann::json& c) {
  if (c.is_null()) return "";
  std::ostringstream out;
  out << "confidence head calibration (" << c.value("node", "eval") << ", step " << integer(c["global_step"])
      << "): position verified predicted observed\n";
  for (const auto& row : c["rows"])
    out << "  k=" << integer(row.value("position", nlohmann::json())) << " " << integer(row.value("verified", nlohmann::json()))
        << " " << number(row.value("predicted", nlohmann::json()), 3) << " "
        << number(row.value("observed", nlohmann::json()), 3) << "\n";
  return out.str();
}

}  // namespace dflow::report
