// The HTML report: one file, no network, one drawn element per declared node
// and edge, and it draws in a real browser without script errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "browser.hpp"
#include "fixture.hpp"
#include "report/command.hpp"
#include "report/html.hpp"
#include "report/page_data.hpp"

using namespace dflow::report;
namespace fs = std::filesystem;

namespace {
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}
}  // namespace

TEST_CASE("Report.Html.DrawsEveryDeclaredNodeAndEdgeAndNeedsNoNetwork") {
  for (bool with_graph : {true, false}) {
    CAPTURE(with_graph);
    const fs::path dir = test::fresh_dir(with_graph ? "html-graph" : "html-no-graph");
    test::write_fixture_run(dir, {.steps = 60, .total_steps = 60, .write_graph = with_graph});
    const std::string html = render_html(load_run(dir));
    CHECK(count(html, "class=\"node\"") == 10);
    CHECK(count(html, "class=\"edge\"") == 11);
    const auto graph = test::default_graph(2);  // a loop over a member of a temporary reads freed memory
    for (const auto& e : graph["edges"]) {
      std::string name = e["name"];
      name = std::regex_replace(name, std::regex(">"), "&gt;");
      CHECK_MESSAGE(count(html, "data-edge=\"" + name + "\"") == 1, name);
    }
    CHECK(count(html, "data-node=\"target\"") == 1);
    CHECK(count(html, "http://") == 0);
    CHECK(count(html, "https://") == 0);
    CHECK(count(html, "<script src") == 0);
    CHECK(count(html, "<link") == 0);
    CHECK(count(html, "</script>") == 2);  // the data and the script; nothing in the data closes them
  }
}

TEST_CASE("Report.Html.ARunWithoutTelemetryOrGraphStillRenders") {
  const fs::path dir = test::fresh_dir("html-bare");
  std::ofstream out(dir / "metrics.jsonl");
  for (int s = 1; s <= 5; ++s) out << nlohmann::json{{"kind", "step"}, {"global_step", s}, {"loss", 2.0 / s}}.dump() << "\n";
  out.close();
  const std::string html = render_html(load_run(dir));
  CHECK(count(html, "class=\"node\"") == 0);
  CHECK(html.find("No graph telemetry") != std::string::npos);
}

TEST_CASE("Report.Html.ALongRunIsThinnedButKeepsEdgePointsAndGuardDecisions") {
  const fs::path dir = test::fresh_dir("html-long");
  test::write_fixture_run(dir, {.steps = 3000, .total_steps = 3000, .checkpoint_every = 1000, .guard_skip_step = 1777, .alarms = false});
  ReportOptions options;
  options.max_points = 200;
  const Page page = make_page(load_run(dir, {.telemetry_points = 300, .telemetry_tail = 60}), options);
  CHECK(page.records.size() <= 2 * 200 + 2);
  size_t with_telemetry = 0;
  bool guard_kept = false;
  for (const auto& r : page.records) {
    with_telemetry += r.contains("tel");
    guard_kept = guard_kept || (r["s"] == 1777 && r.contains("g"));
  }
  CHECK(with_telemetry >= 100);  // of about 240 kept by load_run, thinned to at most 200
  CHECK(guard_kept);
  CHECK(page.records.back()["s"] == 3000);
}

TEST_CASE("Report.Html.ThinsLongRunsButKeepsGuardDecisions") {
  auto kept = thin(10000, 100, [](size_t i) { return i == 4321; });
  CHECK(kept.size() <= 102);
  CHECK(kept.front() == 0);
  CHECK(kept.back() == 9999);
  CHECK(std::find(kept.begin(), kept.end(), 4321) != kept.end());
  CHECK(thin(5, 100, {}).size() == 5);
  CHECK(script_json("</script><!--").find("</") == std::string::npos);
}

TEST_CASE("Report.Html.RendersInHeadlessChromiumWithoutScriptErrors") {
  const std::string chromium = test::find_chromium();
  if (chromium.empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  const fs::path dir = test::fresh_dir("html-browser");
  test::write_fixture_run(dir, {.steps = 400, .total_steps = 1200, .draining_edge = "load.out->pad.in"});
  const fs::path report = test::build_dir() / "report-fixture.html";
  std::ostringstream console;
  CHECK(report_command(dir, report, console) == 0);
  CHECK(console.str().find("`target` (target_forward x2) bounds throughput") != std::string::npos);
  const std::string url = "file://" + fs::absolute(report).string();

  const std::string dom = test::run_chromium("--virtual-time-budget=5000 --dump-dom", url, dir / "dump-dom.log");
  INFO("chromium log: " << (dir / "dump-dom.log").string());
  REQUIRE_MESSAGE(!dom.empty(), "chromium printed no DOM");
  std::smatch errors;
  std::regex_search(dom, errors, std::regex("<div id=\"errors\"[^>]*>([^<]*)</div>"));
  CHECK_MESSAGE(dom.find("data-rendered=\"ok\"") != std::string::npos, "the page did not finish drawing: " << errors.str(1));
  CHECK(dom.find("data-rendered=\"error\"") == std::string::npos);
  CHECK(count(dom, "class=\"plot\"") == 10 + 12);  // training plots, one per telemetry edge
  CHECK(dom.find("Loss by length bucket") != std::string::npos);
  CHECK(dom.find("bucket 256 tokens") != std::string::npos);
  CHECK(dom.find("Gradient norm by length bucket") != std::string::npos);
  CHECK(dom.find("bounds throughput") != std::string::npos);
  CHECK(dom.find("is draining") != std::string::npos);
  CHECK(std::regex_search(dom, std::regex("busy 9[3-7]% \\(9[3-7]% / 9[3-7]%\\)")));  // target, both replicas

  const fs::path screenshot = test::build_dir() / "report-screenshot.png";
  fs::remove(screenshot);
  test::run_chromium("--virtual-time-budget=5000 --hide-scrollbars --window-size=1400,2400 --screenshot=" + screenshot.string(), url,
                     dir / "screenshot.log");
  REQUIRE(fs::exists(screenshot));
  CHECK(fs::file_size(screenshot) > 50000);
  MESSAGE("screenshot: " << screenshot.string());
}

TEST_CASE("Report.Html.CallCountsAreWholeNumbers") {
  const std::string chromium = test::find_chromium();
  if (chromium.empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  const fs::path dir = test::fresh_dir("html-calls");
  // 61 steps: nodes called once a step show 61 calls, which once read "61.0 calls".
  test::write_fixture_run(dir, {.steps = 61, .total_steps = 200, .checkpoint_every = 50, .guard_skip_step = -1});
  const fs::path report = dir / "report.html";
  std::ostringstream console;
  REQUIRE(report_command(dir, report, console) == 0);
  const std::string dom = test::run_chromium("--virtual-time-budget=5000 --dump-dom",
                                             "file://" + fs::absolute(report).string(), dir / "dump-dom.log");
  REQUIRE_MESSAGE(dom.find("data-rendered=\"ok\"") != std::string::npos, "the page did not finish drawing");
  CHECK(dom.find("\u00b7 61 calls") != std::string::npos);
  CHECK_FALSE(std::regex_search(dom, std::regex("[0-9]\\.[0-9]+ calls")));
  CHECK_FALSE(std::regex_search(dom, std::regex("[0-9]\\.[0-9]+ batches")));
}

TEST_CASE("Report.Html.ConfidenceCalibrationOfTheNewestEvalIsATableAndText") {
  const fs::path dir = test::fresh_dir("html-calibration");
  std::ofstream out(dir / "metrics.jsonl");
  for (int s = 1; s <= 4; ++s) out << nlohmann::json{{"kind", "step"}, {"global_step", s}, {"loss", 2.0 / s}}.dump() << "\n";
  auto rows = [](double observed) {
    return nlohmann::json::array({{{"position", 1}, {"verified", 40}, {"predicted", 0.625}, {"observed", observed}},
                                  {{"position", 2}, {"verified", 12}, {"predicted", 0.25}, {"observed", 0.5}}});
  };
  out << nlohmann::json{{"kind", "eval"}, {"node", "eval"}, {"global_step", 2}, {"mean_tau", 1.5},
                        {"confidence_calibration", rows(0.1)}}.dump() << "\n";
  out << nlohmann::json{{"kind", "eval"}, {"node", "eval"}, {"global_step", 4}, {"mean_tau", 1.75},
                        {"confidence_calibration", rows(0.3)}}.dump() << "\n";
  out.close();
  const std::string html = render_html(load_run(dir));
  CHECK(count(html, "<h2>Confidence head calibration</h2>") == 1);
  CHECK(count(html, "<tr><td>1</td><td>40</td><td>0.625</td><td>0.300</td></tr>") == 1);  // the newest record
  CHECK(count(html, "<tr><td>2</td><td>12</td><td>0.250</td><td>0.500</td></tr>") == 1);
  CHECK(count(html, "0.100") == 0);
  std::ostringstream text;
  report_command(dir, dir / "report.html", text);
  CHECK(text.str().find("confidence head calibration (eval, step 4)") != std::string::npos);
  CHECK(text.str().find("k=1 40 0.625 0.300") != std::string::npos);

  // A run whose evals carry no calibration (a drafter without a confidence head) has no such section.
  const fs::path plain = test::fresh_dir("html-no-calibration");
  std::ofstream(plain / "metrics.jsonl") << nlohmann::json{{"kind", "step"}, {"global_step", 1}, {"loss", 1.0}}.dump() << "\n"
                                         << nlohmann::json{{"kind", "eval"}, {"global_step", 1}, {"mean_tau", 1.2}}.dump() << "\n";
  CHECK(count(render_html(load_run(plain)), "Confidence head calibration") == 0);
}

// A run whose loss reads the target's distribution: the tau its training
// slots imply (expected_tau) is drawn in the tau plot beside the eval node's
// measured tau; without it the plot stays the measured one alone.
TEST_CASE("Report.Html.ExpectedTauIsDrawnBesideTheMeasuredTau") {
  const std::string chromium = test::find_chromium();
  if (chromium.empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  const fs::path dir = test::fresh_dir("html-expected-tau");
  test::write_fixture_run(dir, {.steps = 61, .total_steps = 200, .checkpoint_every = 50, .guard_skip_step = -1});
  std::vector<std::string> lines;
  {
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  auto draw = [&](bool expected) {
    std::ofstream out(dir / "metrics.jsonl", std::ios::trunc);
    for (const auto& line : lines) {
      auto r = nlohmann::json::parse(line);
      const bool step = r.value("kind", "") == "step";
      if (expected && step) r["expected_tau"] = 1.0 + 0.1 * r["global_step"].get<double>();
      out << r.dump() << "\n";
      // The eval node's records, every 20 steps, as it writes them after the step's.
      if (step && r["global_step"].get<int>() % 20 == 0)
        out << nlohmann::json{{"kind", "eval"}, {"global_step", r["global_step"]}, {"mean_tau", 2.5}}.dump() << "\n";
    }
    out.close();
    const fs::path report = dir / "report.html";
    std::ostringstream console;
    REQUIRE(report_command(dir, report, console) == 0);
    return test::run_chromium("--virtual-time-budget=5000 --dump-dom", "file://" + fs::absolute(report).string(),
                              dir / "dump-dom.log");
  };
  const std::string with = draw(true);
  REQUIRE_MESSAGE(with.find("data-rendered=\"ok\"") != std::string::npos, "the page did not finish drawing");
  // As drawn (the page's script holds these words too, so each is looked
  // for as the plot's title and legend render it).
  CHECK(with.find("measured on held-out prompts, and expected from the training slots") != std::string::npos);
  CHECK(with.find("</i>tau expected (training slots") != std::string::npos);
  CHECK(with.find("</i>tau measured (eval node") != std::string::npos);
  const std::string without = draw(false);
  REQUIRE(without.find("data-rendered=\"ok\"") != std::string::npos);
  CHECK(without.find("</i>tau measured (eval node") != std::string::npos);
  CHECK(without.find("</i>tau expected") == std::string::npos);
  CHECK(without.find("measured on held-out prompts, and expected") == std::string::npos);
}
