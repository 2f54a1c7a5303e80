#pragma once
// The report page's script (report/assets/report_plot.js, then report.js) and
// style (report.css), embedded at configure time: a report needs no network.
namespace dflow::report::assets {
extern const char* const kScript;
extern const char* const kStyle;
}  // namespace dflow::report::assets
