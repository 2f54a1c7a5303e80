#pragma once
// The live view of a running training: `dflow train --serve 127.0.0.1:PORT`.
// The run publishes each record (thread-safe) and the declared graph; the
// server answers on its own threads (3), never blocking the run for longer
// than a copy under a mutex, and renders the page at most once per published
// record however many clients poll it. Read-only: GET only, these routes only
// (anything else is a 4xx), no files served:
//   /               the report page, re-fetching its data every refresh_ms
//   /metrics        Prometheus text of the newest step record and telemetry
//   /graph.json     the declared graph as set_graph() gave it (null before)
//   /records.json?since=N   {"next": K, "records": [...]}: the records published
//                   after the first N (a cursor, not a step: pass back K), of the
//                   newest max_records kept. &slim=1 gives the page's slim step
//                   records (thinned evenly over the run) and event marks.
//   /summary.json   the analysis, the summary table and the graph's version
// Loopback only unless allow_remote: the page shows the run's paths and data.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <string>

#include "report/html.hpp"

namespace dflow::report {

struct LiveServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // 0: any free port (see LiveServer::port())
  bool allow_remote = false;  // bind a non-loopback address
  size_t max_records = 1000;  // full records kept for records.json (the page keeps its own, thinned)
  std::string run_dir{};      // shown on the page
  ReportOptions report{};     // page options; `live` is forced on
};

// "127.0.0.1:8080", "localhost:0", "[::1]:8080" -> host and port; throws
// ConfigError on anything else.
LiveServerOptions parse_serve_address(const std::string& address);

// True for localhost, 127.0.0.0/8 and ::1.
bool is_loopback_host(const std::string& host);

class LiveServer {
 public:
  explicit LiveServer(LiveServerOptions options);
  ~LiveServer();  // stops
  LiveServer(const LiveServer&) = delete;
  LiveServer& operator=(const LiveServer&) = delete;

  // Binds and starts serving on a background thread; throws ConfigError for a
  // non-loopback host without allow_remote, std::runtime_error when the
  // address cannot be bound.
  void start();
  void stop();  // idempotent; joins the server thread
  bool running() const;
  int port() const;         // the bound port once started
  std::string url() const;  // "http://127.0.0.1:PORT/"

  void publish(const nlohmann::json& record);  // any record kind; thread-safe
  void set_graph(const nlohmann::json& graph); // graph::to_json of the description; thread-safe

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dflow::report
