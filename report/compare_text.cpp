// `dflow compare` on the terminal: the runs as columns, winners marked.
#include <algorithm>
#include <sstream>

#include "report/compare_render.hpp"

namespace dflow::report {

namespace {

// Left-aligned columns, three spaces apart, each line indented by `indent`.
std::string aligned(const std::vector<std::vector<std::string>>& lines, const std::string& indent = "") {
  std::vector<size_t> widths;
  for (const auto& line : lines)
    for (size_t c = 0; c < line.size(); ++c) {
      if (widths.size() <= c) widths.push_back(0);
      widths[c] = std::max(widths[c], line[c].size());
    }
  std::string out;
  for (const auto& line : lines) {
    std::string text = indent;
    for (size_t c = 0; c < line.size(); ++c)
      text += c + 1 < line.size() ? line[c] + std::string(widths[c] - line[c].size() + 3, ' ') : line[c];
    out += text + "\n";
  }
  return out;
}

std::vector<std::string> header(const Comparison& c, std::string first) {
  std::vector<std::string> line{std::move(first)};
  for (const auto& run : c.runs) line.push_back(run.name);
  return line;
}

}  // namespace

std::string compare_table(const Comparison& c) {
  std::ostringstream out;
  std::vector<std::vector<std::string>> summary{header(c, "")};
  bool any_win = false;
  for (const auto& row : summary_rows(c)) {
    std::vector<std::string> line{row.label};
    for (size_t i = 0; i < row.cells.size(); ++i) {
      line.push_back(row.cells[i] + (row.wins[i] ? " *" : ""));
      any_win = any_win || row.wins[i];
    }
    summary.push_back(std::move(line));
  }
  out << aligned(summary) << (any_win ? "(* the best of the runs)\n" : "");

  if (const auto rows = variant_rows(c); !rows.empty()) {
    out << "\nvariants (runs that differ only in seed, grouped: mean ± sd)\n";
    std::vector<std::vector<std::string>> lines{{""}};
    for (const auto& v : c.variants) lines.front().push_back(v.name);
    for (const auto& row : rows) {
      lines.push_back({row.label});
      lines.back().insert(lines.back().end(), row.cells.begin(), row.cells.end());
    }
    out << aligned(lines, "  ");
  }

  out << "\nwinners\n";
  for (const auto& winner : c.winners) out << "  " << winner_line(c, winner) << "\n";
  out << "  (" << kWinnerRule << ")\n";

  const bool any_config = std::any_of(c.runs.begin(), c.runs.end(), [](const RunSummary& r) { return r.config.has_value(); });
  out << "\nconfig: ";
  if (!any_config) out << "not compared: no run holds a resolved config yet (it is saved with each checkpoint)\n";
  else if (c.config_diff.empty()) out << "the same in every run that has one\n";
  else {
    out << c.config_diff.size() << (c.config_diff.size() == 1 ? " key differs" : " keys differ") << "\n";
    std::vector<std::vector<std::string>> keys{header(c, "key")};
    for (const auto& d : c.config_diff) {
      keys.push_back({d.key});
      keys.back().insert(keys.back().end(), d.values.begin(), d.values.end());
    }
    out << aligned(keys, "  ");
  }
  for (const auto& run : c.runs)
    if (run.config) out << "  " << run.name << ": " << run.config->file.string() << "\n";

  out << "\nwhere each graph waited\n";
  for (const auto& run : c.runs) {
    out << "  " << run.name << "\n";
    if (run.waits.empty()) out << "    (no findings)\n";
    for (const auto& line : run.waits) out << "    - " << line << "\n";
  }

  std::vector<std::string> notes = c.notes;
  for (const auto& run : c.runs)
    for (const auto& warning : run.warnings) notes.push_back(run.name + ": " + warning);
  if (!notes.empty()) {
    out << "\nnotes\n";
    for (const auto& note : notes) out << "  - " << note << "\n";
  }
  return out.str();
}

}  // namespace dflow::report
