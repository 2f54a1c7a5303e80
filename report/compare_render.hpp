#pragma once
// `dflow compare`'s two renderings of a Comparison: an aligned text table for
// the terminal (compare_text.cpp) and one self-contained HTML page with the
// loss and tau curves of every run overlaid (compare_html.cpp). Both show the
// same rows, built here once.
#include <optional>
#include <string>
#include <vector>

#include "report/compare.hpp"

namespace dflow::report {

// One line of the side-by-side summary.
struct CompareRow {
  std::string label;               // "final loss (mean of last 10 steps)"
  std::vector<std::string> cells;  // one per run; "-" where the run has no value
  std::vector<bool> wins;          // the cells of the run(s) that win this row's metric
};

std::vector<CompareRow> summary_rows(const Comparison& comparison);

// The variants side by side, seeds aggregated (mean ± sd over each variant's
// runs): seeds, final loss, best tau, tau at the common steps, time to the
// tau target, throughput. Empty when every variant is one run.
std::vector<CompareRow> variant_rows(const Comparison& comparison);

// "lowest final loss (mean of last 10 steps): lr-high 1.234 (lr-low 1.567)".
std::string winner_line(const Comparison& comparison, const Winner& winner);

// Numbers as the table shows them: "1.234", "12.3k", "1m05s"; "-" when unknown.
std::string format_number(double value, int significant = 4);
std::string format_rate(double per_s);
std::string format_duration(double seconds);

// The whole comparison as text: summary table with winners marked, winner
// lines, the config keys that differ, where each graph waited, notes.
std::string compare_table(const Comparison& comparison);

struct CompareHtmlOptions {
  std::string title{};       // "" = the runs' names
  size_t max_points = 2000;  // loss points per run embedded, evenly thinned
};

std::string render_compare_html(const Comparison& comparison, const CompareHtmlOptions& options = {});

// The plots the page draws, titles as shown: loss and tau, over steps and over wall time.
inline constexpr const char* kComparePlotTitles[] = {"Loss over steps", "Loss over wall time", "Tau over steps",
                                                     "Tau over wall time"};

}  // namespace dflow::report
