#pragma once
// The report page's script (report/assets/report_plot.js, then report.js) and
// style (report.css), embedded at configure time: a report needs no network.
// `dflow compare`'s page: report_plot.js then compare.js, and compare.css
// after report.css.
namespace dflow::report::assets {
extern const char* const kScript;
extern const char* const kStyle;
extern const char* const kCompareScript;
extern const char* const kCompareStyle;
}  // namespace dflow::report::assets
