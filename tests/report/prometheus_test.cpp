// /metrics follows the Prometheus text exposition format, so a scraper takes it.
#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "fixture.hpp"
#include "report/prometheus.hpp"

using namespace dflow::report;

namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// Checks the format rules and returns the samples; a violation fails the test.
std::vector<Sample> parse_exposition(const std::string& text) {
  static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  static const std::regex label(R"(^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\["\\n])*)\"(,|$))");
  static const std::regex number(R"(^[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)$)");
  std::vector<Sample> out;
  std::set<std::string> typed, finished;
  std::string current;
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      CHECK_MESSAGE(typed.insert(m[1]).second, "TYPE given twice");
      if (!current.empty()) finished.insert(current);
      current = m[1];
      continue;
    }
    REQUIRE(std::regex_match(line, m, sample));
    Sample s{m[1], {}, m[4]};
    CHECK_MESSAGE(s.name == current, "a sample outside its family (TYPE must come first, samples together)");
    CHECK_FALSE(finished.count(s.name));
    CHECK(s.name.rfind("dflow_", 0) == 0);
    std::string rest = m[3];
    while (!rest.empty()) {
      std::smatch l;
      REQUIRE_MESSAGE(std::regex_search(rest, l, label), "bad label syntax: " << rest);
      s.labels[l[1]] = l[2];
      rest = l.suffix();
    }
    CHECK_MESSAGE((std::regex_match(s.value, number) || s.value == "NaN" || s.value == "+Inf" || s.value == "-Inf"), s.value);
    out.push_back(std::move(s));
  }
  return out;
}

const Sample* find(const std::vector<Sample>& samples, const std::string& name, const std::string& key = "",
                   const std::string& value = "") {
  for (const auto& s : samples)
    if (s.name == name && (key.empty() || (s.labels.count(key) && s.labels.at(key) == value))) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("Report.Prometheus.FollowsTheExpositionFormat") {
  const auto records = test::fixture_records({.steps = 150, .total_steps = 300, .alarms = false});
  const nlohmann::json& last = records.back().value("kind", "") == "step" ? records.back() : records[records.size() - 2];
  REQUIRE(last["kind"] == "step");
  const std::string text = to_prometheus(last, last["telemetry"]);
  const auto samples = parse_exposition(text);
  REQUIRE(find(samples, "dflow_global_step"));
  CHECK(find(samples, "dflow_global_step")->value == "150");
  CHECK(find(samples, "dflow_loss")->value == "NaN");  // step 150: the guard skipped a non-finite loss
  CHECK(find(samples, "dflow_guard_applied")->value == "0");
  CHECK(find(samples, "dflow_accuracy", "position", "15"));
  CHECK(find(samples, "dflow_edge_occupancy", "edge", "route.out->target[1].in"));
  CHECK(find(samples, "dflow_edge_producer_blocked_seconds_total", "edge", "load.out->pad.in"));
  CHECK(find(samples, "dflow_node_busy_seconds_total", "node", "target"));
  CHECK(find(samples, "dflow_tokens_per_second"));
  CHECK(text.find("# TYPE dflow_node_calls_total counter") != std::string::npos);
}

TEST_CASE("Report.Prometheus.EscapesLabelsAndToleratesMissingParts") {
  nlohmann::json telemetry = {{"elapsed_s", 1.5},
                              {"edges", {{{"name", "a\"b\\c\nd"}, {"capacity", 2}, {"occupancy", 1}}}},
                              {"nodes", nlohmann::json::array()}};
  const auto samples = parse_exposition(to_prometheus(nullptr, telemetry));
  REQUIRE(find(samples, "dflow_edge_capacity"));
  CHECK(find(samples, "dflow_edge_capacity")->labels.at("edge") == R"(a\"b\\c\nd)");
  CHECK_FALSE(find(samples, "dflow_global_step"));
  CHECK(to_prometheus(nullptr, nullptr).empty());
}
