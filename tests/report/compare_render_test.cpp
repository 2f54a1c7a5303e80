// `dflow compare` as a person reads it: the table marks the winners and says
// what differs; the page names every run, has the four curve plots and draws
// in a real browser without network or script errors.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "browser.hpp"
#include "compare_runs.hpp"
#include "config/errors.hpp"
#include "fixture.hpp"
#include "report/command.hpp"
#include "report/compare_render.hpp"

using namespace dflow::report;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Two realistic runs (the report's fixture: telemetry, graph, checkpoints) that
// differ in lr and speed, with evaluations and a config in their newest checkpoint.
std::vector<fs::path> two_fixture_runs() {
  const fs::path fast = test::fresh_dir("compare-lr-high"), slow = test::fresh_dir("compare-lr-low");
  test::write_fixture_run(fast, {.steps = 200, .total_steps = 200, .seed = 7});
  test::write_fixture_run(slow, {.steps = 150, .total_steps = 200, .bound = "drafter", .seed = 8});
  {
    std::ofstream(fast / "metrics.jsonl", std::ios::app) << test::eval_record(0, 1.0).dump() << "\n"
                                                         << test::eval_record(100, 4.5).dump() << "\n"
                                                         << test::eval_record(200, 5.25).dump() << "\n";
    std::ofstream(slow / "metrics.jsonl", std::ios::app) << test::eval_record(0, 1.0).dump() << "\n"
                                                         << test::eval_record(100, 3.5).dump() << "\n";
  }
  test::write_checkpoint_config(fast, "step-200", test::config_yaml(fast.string(), "0.1", "pad_bucket.token_budget", 2));
  test::write_checkpoint_config(slow, "step-100", test::config_yaml(slow.string(), "0.02", "pad_bucket.token_budget", 2));
  return {fast, slow};
}

}  // namespace

TEST_CASE("Compare.Table.MarksTheWinnersAndShowsOnlyTheKeysThatDiffer") {
  const Comparison c = compare_runs(two_fixture_runs(), {.recent_steps = 50});
  const std::string table = compare_table(c);
  INFO(table);
  CHECK(table.find("compare-lr-high") != std::string::npos);
  CHECK(table.find("compare-lr-low") != std::string::npos);
  CHECK(std::regex_search(table, std::regex("best tau +5\\.25 at step 200 \\*")));
  CHECK(table.find("highest best tau: compare-lr-high 5.25; compare-lr-low 3.5") != std::string::npos);
  CHECK(table.find("lowest final loss (mean of last 10 steps): ") != std::string::npos);
  CHECK(table.find("highest throughput (last 50 steps): ") != std::string::npos);
  CHECK(table.find("config: 1 key differs") != std::string::npos);
  CHECK(std::regex_search(table, std::regex("train\\.lr +0\\.1 +0\\.02")));
  CHECK(table.find("pipeline.nodes") == std::string::npos);  // the same in both
  CHECK(table.find("`target` (target_forward x2) bounds throughput") != std::string::npos);
  CHECK(table.find("`drafter` (drafter_step) bounds throughput") != std::string::npos);
  CHECK(table.find("different steps (compare-lr-high 200, compare-lr-low 150)") != std::string::npos);
}

TEST_CASE("Compare.Html.NamesEveryRunTheFourPlotsAndTheKeysThatDiffer") {
  const Comparison c = compare_runs(two_fixture_runs());
  const std::string html = render_compare_html(c);
  for (const auto& run : c.runs) CHECK(count(html, run.name) >= 3);  // title, tables, plot data
  for (const char* title : kComparePlotTitles) CHECK_MESSAGE(count(html, title) == 1, title);
  CHECK(html.find("<code>train.lr</code>") != std::string::npos);
  CHECK(count(html, "class=\"win\"") >= 2);
  CHECK(count(html, "http://") == 0);
  CHECK(count(html, "https://") == 0);
  CHECK(count(html, "<script src") == 0);
  CHECK(count(html, "<link") == 0);
  CHECK(count(html, "</script>") == 2);
}

TEST_CASE("Compare.Html.DrawsInHeadlessChromiumWithoutScriptErrors") {
  if (test::find_chromium().empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  const auto runs = two_fixture_runs();
  const fs::path page = test::build_dir() / "compare-fixture.html";
  std::ostringstream console;
  REQUIRE(compare_command(runs, page, console) == 0);
  const fs::path log = runs[0].parent_path() / "compare-dump-dom.log";
  const std::string dom = test::run_chromium("--virtual-time-budget=5000 --dump-dom", "file://" + fs::absolute(page).string(), log);
  INFO("chromium log: " << log.string());
  REQUIRE_MESSAGE(!dom.empty(), "chromium printed no DOM");
  std::smatch errors;
  std::regex_search(dom, errors, std::regex("<div id=\"errors\"[^>]*>([^<]*)</div>"));
  CHECK_MESSAGE(dom.find("data-rendered=\"ok\"") != std::string::npos, "the page did not finish drawing: " << errors.str(1));
  const std::string drawn = dom.substr(0, dom.find("<script"));  // the page, not its script's text
  CHECK(count(drawn, "class=\"plot\"") == 4);
  CHECK(count(drawn, "<circle") == 2 * 5);  // one dot per evaluation, over steps and over wall time
  CHECK(count(drawn, "class=\"empty\"") == 0);  // every plot has data
}

TEST_CASE("Compare.Html.FourRunsOfASweepFitThePageWidth") {
  if (test::find_chromium().empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  // Four runs named as dflow sweep names them, under a long --out.
  const fs::path sweep = test::fresh_dir("compare-sweep-of-four") / "runs" / "optimizer-sweep-with-a-long-name";
  std::vector<fs::path> runs;
  for (const char* optimizer : {"optimizer_step.adamw", "optimizer_step.muon"})
    for (int seed : {1234, 1235}) {
      const std::string name = std::string("optimizer=") + optimizer + "+seed=" + std::to_string(seed);
      runs.push_back(sweep / name);
      test::write_fixture_run(runs.back(), {.steps = 120, .total_steps = 120, .seed = static_cast<uint64_t>(seed)});
      std::ofstream(runs.back() / "metrics.jsonl", std::ios::app) << test::eval_record(0, 1.0).dump() << "\n"
                                                                  << test::eval_record(100, 1.5).dump() << "\n";
      test::write_checkpoint_config(runs.back(), "step-100", test::config_yaml(runs.back().string(), seed == 1234 ? "0.01" : "0.02", "pad_bucket.token_budget", 2));
    }
  const fs::path page = sweep / "compare.html";
  std::ostringstream console;
  REQUIRE(compare_command(runs, page, console) == 0);
  const std::string html = read_text(page);
  CHECK(html.find("<h1>dflow compare \u00b7 4 runs") != std::string::npos);  // the tables name them
  CHECK(html.find("<h1>dflow compare \u00b7 optimizer") == std::string::npos);
  // The page in a 1280 px wide frame of a page that measures it (same origin: file access allowed).
  const fs::path probe = sweep / "measure.html";
  std::ofstream(probe) << "<!DOCTYPE html><html><body><div id=\"result\">pending</div>"
                          "<iframe id=\"page\" src=\"compare.html\" style=\"width:1280px;height:900px;border:0\"></iframe><script>"
                          "document.getElementById('page').addEventListener('load', () => {"
                          "  const d = document.getElementById('page').contentDocument;"
                          "  let right = 0;"
                          "  for (const t of d.querySelectorAll('table')) right = Math.max(right, t.getBoundingClientRect().right);"
                          "  document.getElementById('result').textContent = 'page ' + d.documentElement.scrollWidth + ' view ' +"
                          "    d.documentElement.clientWidth + ' tables ' + Math.ceil(right);"
                          "});</script></body></html>";
  const std::string dom = test::run_chromium("--allow-file-access-from-files --virtual-time-budget=5000 --dump-dom",
                                             "file://" + fs::absolute(probe).string(), sweep / "measure.log");
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(dom, m, std::regex("page (\\d+) view (\\d+) tables (\\d+)")), dom);
  INFO(m.str(0));
  CHECK(std::stoi(m.str(1)) <= std::stoi(m.str(2)));  // the page does not scroll sideways
  CHECK(std::stoi(m.str(3)) <= std::stoi(m.str(2)));  // no table reaches past it
}

TEST_CASE("Compare.Command.WritesThePagePrintsTheTableAndRefusesFewerThanTwoRuns") {
  const auto runs = two_fixture_runs();
  const fs::path page = runs[0].parent_path() / "compare-command.html";
  std::ostringstream console;
  CHECK(compare_command(runs, page, console) == 0);
  CHECK(read_text(page).find("Loss over wall time") != std::string::npos);
  CHECK(console.str().find("winners") != std::string::npos);
  CHECK_THROWS_AS(compare_command({runs[0]}, page, console), dflow::ConfigError);
  const fs::path not_a_run = test::fresh_dir("compare-empty");
  const std::string name = not_a_run.string();
  CHECK_THROWS_WITH_AS(compare_command({runs[0], not_a_run}, page, console), doctest::Contains(name.c_str()), dflow::ConfigError);
}
