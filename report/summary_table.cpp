#include "report/summary_table.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <vector>

namespace dflow::report {

namespace {

using Row = std::vector<std::string>;

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string percent(double share) { return fixed(100 * share, 1) + "%"; }

// First column left-aligned, numbers right-aligned, two spaces between.
void print(std::ostringstream& out, const std::vector<Row>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += c == 0 ? row[c] + pad : "  " + pad + row[c];
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
}

}  // namespace

std::string summary_table(const nlohmann::json& telemetry) {
  const double elapsed_s = telemetry.value("elapsed_s", 0.0);
  auto share = [&](double seconds) { return elapsed_s > 0 ? percent(seconds / elapsed_s) : std::string("-"); };
  std::ostringstream out;
  out << "graph telemetry over " << fixed(elapsed_s, 1) << " s\n\n";

  std::vector<Row> nodes{{"node", "calls", "busy s", "busy", "max s", "errors"}};
  for (const auto& n : telemetry.value("nodes", nlohmann::json::array())) {
    std::string name = n.value("name", "");
    if (n.value("replicas", 1) > 1) name.append("[").append(std::to_string(n.value("replica", 0))).append("]");
    const double busy_s = n.value("busy_s", 0.0);
    nodes.push_back({name, std::to_string(n.value("calls", uint64_t{0})), fixed(busy_s, 2), share(busy_s),
                     fixed(n.value("max_s", 0.0), 3), std::to_string(n.value("errors", uint64_t{0}))});
  }
  print(out, nodes);
  out << "\n";

  std::vector<Row> edges{{"edge", "capacity", "mean", "high water", "items", "blocked s", "blocked", "starved s", "starved"}};
  for (const auto& e : telemetry.value("edges", nlohmann::json::array())) {
    const double blocked_s = e.value("producer_blocked_s", 0.0), starved_s = e.value("consumer_starved_s", 0.0);
    edges.push_back({e.value("name", "") + (e.value("token", false) ? " (token)" : ""), std::to_string(e.value("capacity", 0)),
                     fixed(e.value("mean_occupancy", 0.0), 2), std::to_string(e.value("high_water", 0)),
                     std::to_string(e.value("items_passed", uint64_t{0})), fixed(blocked_s, 2), share(blocked_s),
                     fixed(starved_s, 2), share(starved_s)});
  }
  print(out, edges);
  return out.str();
}

}  // namespace dflow::report
