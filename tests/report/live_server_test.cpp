// The live view: a run publishes records, a browser or a scraper reads them.
#include <doctest/doctest.h>

#include "browser.hpp"
#include "config/errors.hpp"
#include "fixture.hpp"
#include "http_client.hpp"
#include "report/live_server.hpp"

using namespace dflow::report;

namespace {
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}
}  // namespace

TEST_CASE("Report.LiveServer.ServesMetricsGraphPageAndNewRecords") {
  const auto records = test::fixture_records({.steps = 120, .total_steps = 300});
  const nlohmann::json graph = test::default_graph(2);
  LiveServer server({.host = "127.0.0.1", .port = 0, .run_dir = "runs/demo"});
  server.start();
  REQUIRE(server.running());
  const int port = server.port();
  REQUIRE(port > 0);
  CHECK(server.url() == "http://127.0.0.1:" + std::to_string(port) + "/");

  CHECK(test::http_get(port, "/graph.json").body == "null");
  server.set_graph(graph);
  size_t published = 0;
  for (const auto& r : records) {
    if (r["kind"] == "step" && r["global_step"].get<int>() > 100) break;
    server.publish(r);
    ++published;
  }

  auto metrics = test::http_get(port, "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.headers.find("text/plain") != std::string::npos);
  CHECK(metrics.body.find("\ndflow_global_step 100\n") != std::string::npos);
  CHECK(metrics.body.find("dflow_edge_occupancy{edge=\"route.out->target[1].in\"}") != std::string::npos);

  auto graph_reply = test::http_get(port, "/graph.json");
  CHECK(graph_reply.status == 200);
  CHECK(nlohmann::json::parse(graph_reply.body) == graph);

  auto page = test::http_get(port, "/");
  CHECK(page.status == 200);
  CHECK(count(page.body, "class=\"node\"") == 10);
  CHECK(count(page.body, "class=\"edge\"") == 11);
  CHECK(page.body.find("\"live\":true") != std::string::npos);
  CHECK(count(page.body, "http://") == 0);

  auto first = nlohmann::json::parse(test::http_get(port, "/records.json?since=0").body);
  CHECK(first["next"] == published);
  CHECK(first["records"].size() == published);
  server.publish(records[published]);  // step 101
  auto more = nlohmann::json::parse(test::http_get(port, "/records.json?since=" + std::to_string(first["next"].get<int>())).body);
  REQUIRE(more["records"].size() == 1);
  CHECK(more["records"][0]["global_step"] == 101);
  CHECK(more["next"] == published + 1);
  auto slim = nlohmann::json::parse(test::http_get(port, "/records.json?slim=1&since=" + std::to_string(published)).body);
  REQUIRE(slim["records"].size() == 1);
  CHECK(slim["records"][0]["s"] == 101);
  CHECK(test::http_get(port, "/records.json?since=abc").status == 400);

  auto summary = nlohmann::json::parse(test::http_get(port, "/summary.json").body);
  CHECK(summary["analysis"]["bottleneck"]["node"] == "target");
  CHECK(summary["graph_version"] == 1);
  CHECK(test::http_get(port, "/nothing").status == 404);

  server.stop();
  CHECK_FALSE(server.running());
  CHECK(test::http_get(port, "/metrics").status == 0);
  server.stop();  // idempotent
}

TEST_CASE("Report.LiveServer.ThePageDrawsAndPollsInHeadlessChromium") {
  if (test::find_chromium().empty())
    FAIL("chromium is not installed: run tools/setup.sh (it installs chromium, which the report tests need)");
  const auto records = test::fixture_records({.steps = 80, .total_steps = 300});
  LiveServerOptions options;
  options.run_dir = "runs/live";
  options.report.refresh_ms = 300;
  LiveServer server(options);
  server.start();
  server.set_graph(test::default_graph(2));
  for (const auto& r : records) server.publish(r);
  const auto dir = test::fresh_dir("live-browser");
  const std::string dom = test::run_chromium("--virtual-time-budget=3000 --dump-dom", server.url(), dir / "dump-dom.log");
  INFO("chromium log: " << (dir / "dump-dom.log").string());
  CHECK(dom.find("data-rendered=\"ok\"") != std::string::npos);
  CHECK(dom.find("live, updated") != std::string::npos);  // it polled records.json and summary.json and redrew
  CHECK(dom.find("from 80 step records") != std::string::npos);
}

TEST_CASE("Report.LiveServer.MemoryStaysBoundedOverALongRun") {
  LiveServerOptions options;
  options.max_records = 60;
  options.report.max_points = 20;
  LiveServer server(options);
  server.start();
  const auto records = test::fixture_records({.steps = 300, .total_steps = 300});
  for (const auto& r : records) server.publish(r);
  auto full = nlohmann::json::parse(test::http_get(server.port(), "/records.json?since=0").body);
  CHECK(full["records"].size() == 60);
  CHECK(full["next"] == records.size());
  auto slim = nlohmann::json::parse(test::http_get(server.port(), "/records.json?slim=1&since=0").body);
  CHECK(slim["records"].size() < 40);
  CHECK(slim["records"].back()["s"] == 300);
  bool guard_kept = false;
  for (const auto& r : slim["records"]) guard_kept = guard_kept || (r["s"] == 150 && r.contains("g"));
  CHECK(guard_kept);
  CHECK(slim["events"].size() == 1 + 3 + 0);  // the guard decision, three checkpoints, no alarm
}

TEST_CASE("Report.LiveServer.RefusesANonLoopbackHostUnlessAllowed") {
  LiveServer open_to_all({.host = "0.0.0.0", .port = 0});
  CHECK_THROWS_AS(open_to_all.start(), dflow::ConfigError);
  CHECK_FALSE(open_to_all.running());
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.3.2.1"));
  CHECK(is_loopback_host("localhost"));
  CHECK(is_loopback_host("::1"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("10.1.2.3"));
  LiveServer allowed({.host = "0.0.0.0", .port = 0, .allow_remote = true});
  allowed.start();
  CHECK(allowed.running());
  CHECK(test::http_get(allowed.port(), "/graph.json").status == 200);
}  // the destructor stops it

TEST_CASE("Report.LiveServer.ParsesServeAddresses") {
  auto a = parse_serve_address("127.0.0.1:8080");
  CHECK(a.host == "127.0.0.1");
  CHECK(a.port == 8080);
  CHECK(parse_serve_address("[::1]:0").host == "::1");
  CHECK(parse_serve_address("localhost:0").port == 0);
  for (const char* bad : {"8080", "127.0.0.1:", ":8080", "127.0.0.1:http", "127.0.0.1:70000"})
    CHECK_THROWS_AS(parse_serve_address(bad), dflow::ConfigError);
}
