// `dflow compare` as one self-contained HTML page: the summary and config
// tables are static HTML; the four curve plots are drawn by the report's own
// plotting script (report/assets/report_plot.js) from the JSON embedded here.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "report/assets.hpp"
#include "report/compare_render.hpp"
#include "report/html.hpp"
#include "report/page_data.hpp"
#include "report/pipeline_svg.hpp"

namespace dflow::report {

namespace {

// The report's palette, so a run has the same color in the tables and the plots.
constexpr const char* kRunColors[] = {"#2f6fd6", "#d6453d", "#2e9d5b", "#e08a1e", "#8e5bd0",
                                      "#1aa3b8", "#c2497f", "#6b7891", "#9c7a12", "#4a3fb5"};

std::string run_color(size_t i) { return kRunColors[i % std::size(kRunColors)]; }

// `name` in the analysis' words as <code>name</code>, like the report page.
std::string codeify(const std::string& text) {
  const std::string escaped = escape_html(text);
  std::string out;
  bool open = false;
  for (char ch : escaped) {
    if (ch != '`') out += ch;
    else out += (open = !open) ? "<code>" : "</code>";
  }
  return open ? out + "</code>" : out;
}

// A name or path with line break opportunities after its separators
// ("lr=0.02+optimizer=...", "sweep/run"), so that a column of it narrows.
std::string breakable(const std::string& text) {
  std::string out;
  for (char ch : text) {
    out += escape_html(std::string(1, ch));
    if (ch == '+' || ch == '/' || ch == '=' || ch == ',') out += "<wbr>";
  }
  return out;
}

std::string run_header(const Comparison& c, const std::string& first) {
  std::string out = "<tr><th>" + escape_html(first) + "</th>";
  for (size_t i = 0; i < c.runs.size(); ++i)
    out += "<th><i class=\"swatch\" style=\"background:" + run_color(i) + "\"></i>" + breakable(c.runs[i].name) + "</th>";
  return out + "</tr>\n";
}

// A table in a frame of the panel's width: its columns wrap, and what cannot scrolls inside it, never the page.
std::string framed(const std::string& table) { return "<div class=\"table-frame\">\n" + table + "</div>\n"; }

std::string summary_table_html(const Comparison& c) {
  std::string out = "<table class=\"compare\">\n" + run_header(c, "");
  for (const auto& row : summary_rows(c)) {
    out += "<tr><th>" + escape_html(row.label) + "</th>";
    for (size_t i = 0; i < row.cells.size(); ++i)
      out += row.wins[i] ? "<td class=\"win\" title=\"the best of the runs\">" + breakable(row.cells[i]) + " \u2605</td>"
                         : "<td>" + breakable(row.cells[i]) + "</td>";
    out += "</tr>\n";
  }
  return framed(out + "</table>\n");
}

// Seeds grouped (empty when every variant is one run).
std::string variants_html(const Comparison& c) {
  const auto rows = variant_rows(c);
  if (rows.empty()) return "";
  std::string out = "<section class=\"panel\"><h2>Variants, seeds grouped (mean \u00b1 sd)</h2>\n"
                    "<div class=\"table-frame\">\n<table class=\"compare\" id=\"variants\">\n<tr><th></th>";
  for (const auto& v : c.variants) out += "<th>" + breakable(v.name) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr><th>" + escape_html(row.label) + "</th>";
    for (const auto& cell : row.cells) out += "<td>" + breakable(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table></div></section>\n";
}

std::string config_html(const Comparison& c) {
  std::string out;
  if (c.config_diff.empty()) {
    const bool any = std::any_of(c.runs.begin(), c.runs.end(), [](const RunSummary& r) { return r.config.has_value(); });
    out = any ? "<p>The resolved configs are the same in every run that has one.</p>\n"
              : "<p>No run holds a resolved config yet (it is saved with each checkpoint).</p>\n";
  } else {
    out = "<table class=\"compare config\">\n" + run_header(c, "key");
    for (const auto& d : c.config_diff) {
      out += "<tr><th><code>" + escape_html(d.key) + "</code></th>";
      for (const auto& value : d.values) out += "<td>" + breakable(value) + "</td>";
      out += "</tr>\n";
    }
    out = framed(out + "</table>\n");
  }
  out += "<p class=\"note\">From each run's newest checkpoint: ";
  for (size_t i = 0; i < c.runs.size(); ++i)
    out += (i ? "; " : "") + escape_html(c.runs[i].name) + " " +
           (c.runs[i].config ? "<code>" + escape_html(c.runs[i].config->file.string()) + "</code>" : std::string("none yet"));
  return out + ". <code>run.out_dir</code> is left out.</p>\n";
}

std::string waits_html(const Comparison& c) {
  std::string out;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    out += "<h3><i class=\"swatch\" style=\"background:" + run_color(i) + "\"></i>" + breakable(c.runs[i].name) + "</h3><ul>";
    for (const auto& line : c.runs[i].waits) out += "<li>" + codeify(line) + "</li>";
    out += c.runs[i].waits.empty() ? "<li>no findings</li></ul>\n" : "</ul>\n";
  }
  return out;
}

std::string notes_html(const Comparison& c) {
  std::string items;
  for (const auto& note : c.notes) items += "<li>" + codeify(note) + "</li>";
  for (const auto& run : c.runs)
    for (const auto& warning : run.warnings) items += "<li>" + escape_html(run.name) + ": " + codeify(warning) + "</li>";
  return items.empty() ? "" : "<section class=\"panel\"><h2>Notes</h2><ul class=\"warn\">" + items + "</ul></section>\n";
}

// {s: steps, t: wall seconds, v: values}, at most max_points, evenly thinned.
nlohmann::json curve_json(const std::vector<CurvePoint>& curve, size_t max_points) {
  nlohmann::json s = nlohmann::json::array(), t = nlohmann::json::array(), v = nlohmann::json::array();
  for (size_t i : thin(curve.size(), max_points, {})) {
    s.push_back(curve[i].step);
    t.push_back(curve[i].wall_s);  // NaN (a record without time) is written as null
    v.push_back(curve[i].value);
  }
  return {{"s", s}, {"t", t}, {"v", v}};
}

nlohmann::json page_data(const Comparison& c, const CompareHtmlOptions& options) {
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < c.runs.size(); ++i)
    runs.push_back({{"name", c.runs[i].name}, {"color", run_color(i)}, {"loss", curve_json(c.runs[i].loss, options.max_points)},
                    {"tau", curve_json(c.runs[i].tau, options.max_points)}});
  nlohmann::json plots = nlohmann::json::array();
  for (size_t k = 0; k < std::size(kComparePlotTitles); ++k)
    plots.push_back({{"title", kComparePlotTitles[k]}, {"y", k < 2 ? "loss" : "tau"}, {"x", k % 2 == 0 ? "s" : "t"},
                     {"xTitle", k % 2 == 0 ? "step" : "seconds"}});
  return {{"runs", runs}, {"plots", plots}, {"generated", local_time_text()}};
}

// "a vs b" for two runs with short names, else how many runs (and variants):
// the tables name them all.
std::string page_title(const Comparison& c, const CompareHtmlOptions& options) {
  if (!options.title.empty()) return options.title;
  if (c.runs.size() == 2 && c.runs[0].name.size() + c.runs[1].name.size() <= 48)
    return c.runs[0].name + " vs " + c.runs[1].name;
  std::string title = std::to_string(c.runs.size()) + " runs";
  if (!c.variants.empty() && c.variants.size() < c.runs.size()) title += " in " + std::to_string(c.variants.size()) + " variants";
  return title;
}

}  // namespace

std::string render_compare_html(const Comparison& c, const CompareHtmlOptions& options) {
  const std::string title = escape_html(page_title(c, options));
  std::string winners;
  for (const auto& w : c.winners) winners += "<li>" + escape_html(winner_line(c, w)) + "</li>";
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>dflow compare \u00b7 " << title << "</title>\n<style>\n" << assets::kStyle << "\n" << assets::kCompareStyle
      << "\n</style>\n</head>\n<body data-rendered=\"no\">\n<header><h1>dflow compare \u00b7 " << title << "</h1>"
      << "<div class=\"sub\">" << c.runs.size() << " runs, each read from its own directory</div></header>\n"
      << "<div id=\"errors\" hidden></div>\n"
      << "<section class=\"panel\"><h2>Which run wins</h2><ul id=\"winners\">" << winners << "</ul><p class=\"note\">How: "
      << escape_html(kWinnerRule) << ".</p></section>\n"
      << variants_html(c)
      << "<section class=\"panel\"><h2>Side by side</h2>\n" << summary_table_html(c) << "</section>\n"
      << "<section class=\"panel\"><h2>Config: the keys that differ</h2>\n" << config_html(c) << "</section>\n"
      << "<section class=\"panel\"><h2>Loss and tau</h2><p class=\"note\">Wall time: the run's training processes, "
         "summed over resumes. Loss: each step (faint) and a moving mean.</p>"
      << "<div class=\"grid\" id=\"compare-plots\"></div></section>\n"
      << "<section class=\"panel\"><h2>Where each graph waited</h2>\n" << waits_html(c) << "</section>\n"
      << notes_html(c) << "<footer id=\"footer\"></footer>\n"
      << "<script type=\"application/json\" id=\"dflow-compare-data\">" << script_json(page_data(c, options)) << "</script>\n"
      << "<script>\n" << assets::kCompareScript << "\n</script>\n</body>\n</html>\n";
  return out.str();
}

}  // namespace dflow::report
