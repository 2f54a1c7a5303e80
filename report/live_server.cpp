#include "report/live_server.hpp"

#include <arpa/inet.h>
#include <httplib.h>

#include <charconv>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <stdexcept>
#include <thread>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "report/page_data.hpp"
#include "report/prometheus.hpp"
#include "report/summary_table.hpp"

namespace dflow::report {

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr ipv4{};
  return inet_pton(AF_INET, host.c_str(), &ipv4) == 1 && (ntohl(ipv4.s_addr) >> 24) == 127;
}

LiveServerOptions parse_serve_address(const std::string& address) {
  auto bad = [&] { return ConfigError("--serve '" + address + "': expected HOST:PORT, e.g. 127.0.0.1:8080 (port 0: any free one)"); };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) throw bad();
  LiveServerOptions options;
  options.host = address.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[' && options.host.back() == ']')
    options.host = options.host.substr(1, options.host.size() - 2);
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  auto [end, ec] = std::from_chars(first, last, options.port);
  if (ec != std::errc() || end != last || options.port < 0 || options.port > 65535) throw bad();
  return options;
}

namespace {
struct Entry {
  int64_t seq = 0;  // 1-based publication count: the records.json cursor
  nlohmann::json record;
};
}  // namespace

struct LiveServer::State {
  LiveServerOptions options;
  httplib::Server server;
  std::thread thread;
  int port = 0;

  std::mutex mutex;  // guards everything below
  int64_t published = 0;
  std::deque<Entry> recent;  // full records, the newest max_records
  std::deque<Entry> slim;    // the page's slim step records, thinned as the run grows (exact: cumulative fields)
  std::vector<Entry> marks;  // events to mark on the plots (few: checkpoints, guard decisions, alarms)
  RecordSlimmer slimmer;
  nlohmann::json graph;
  int64_t graph_version = 0;
  nlohmann::json last_step;
  // The page as last rendered, and for which (records published, graph
  // version) and when: however many clients ask, it is rendered at most once
  // per record and per second (the page then fetches newer records itself),
  // so that viewers never cost the run more than that. The same for the
  // Prometheus text (once per record) and the graph's JSON (once per graph).
  std::shared_ptr<const std::string> page_cache;
  std::pair<int64_t, int64_t> page_cache_key{-1, -1};
  std::chrono::steady_clock::time_point page_rendered_at{};
  std::shared_ptr<const std::string> metrics_cache, graph_text = std::make_shared<const std::string>("null");
  int64_t metrics_cache_at = -1;

  // The newest step records, enough for the analysis's drain window.
  std::vector<nlohmann::json> recent_steps() {
    std::vector<nlohmann::json> out;
    const size_t want = static_cast<size_t>(options.report.analysis.drain.window_steps) + 1;
    for (auto it = recent.rbegin(); it != recent.rend() && out.size() < want; ++it)
      if (it->record.value("kind", "") == "step") out.push_back(it->record);
    return {out.rbegin(), out.rend()};
  }

  // Halves the slim records once they reach twice the page's points: every
  // other one goes, except the newest and guard decisions.
  void thin_slim() {
    if (slim.size() < 2 * std::max<size_t>(options.report.max_points, 2)) return;
    std::deque<Entry> kept;
    for (size_t i = 0; i < slim.size(); ++i)
      if (i % 2 == 0 || i + 1 == slim.size() || slim[i].record.contains("g")) kept.push_back(std::move(slim[i]));
    slim.swap(kept);
  }

  // What the analysis needs, copied under the mutex; the analysis runs outside it.
  struct Snapshot {
    nlohmann::json graph, telemetry;
    std::vector<nlohmann::json> steps;
    int64_t graph_version = 0;
  };
  Snapshot snapshot_locked() {
    Snapshot out{graph, last_step.contains("telemetry") ? last_step["telemetry"] : nlohmann::json(), recent_steps(), graph_version};
    return out;
  }
  nlohmann::json summary(const Snapshot& snap, PipelineModel& pipeline, std::string& table) const {
    const nlohmann::json* telemetry = snap.telemetry.is_object() ? &snap.telemetry : nullptr;
    pipeline = pipeline_model(snap.graph, telemetry);
    table = telemetry ? summary_table(*telemetry) : std::string();
    return analyze(pipeline, snap.steps, options.report.analysis).to_json();
  }

  std::shared_ptr<const std::string> page() {
    Page page;
    Snapshot snap;
    std::pair<int64_t, int64_t> key;
    {
      std::lock_guard lock(mutex);
      key = {published, graph_version};
      if (page_cache && key.second == page_cache_key.second &&
          (key.first == page_cache_key.first || std::chrono::steady_clock::now() - page_rendered_at < std::chrono::seconds(1)))
        return page_cache;
      snap = snapshot_locked();
      for (const auto& e : slim) page.records.push_back(e.record);
      for (const auto& e : marks) page.events.push_back(e.record);
      page.cursor = published;
    }
    page.analysis = summary(snap, page.pipeline, page.table);
    page.graph_version = snap.graph_version;
    page.title = options.report.title.empty() ? "live run" : options.report.title;
    page.run_dir = options.run_dir;
    auto rendered = std::make_shared<const std::string>(render_page(page, options.report));
    std::lock_guard lock(mutex);
    if (key.first >= page_cache_key.first && key.second >= page_cache_key.second)
      page_cache = rendered, page_cache_key = key, page_rendered_at = std::chrono::steady_clock::now();
    return rendered;
  }

  // Full records after the cursor (at most a page of them; "next" says where
  // to go on), or, slim, the page's step records and marks after it.
  nlohmann::json records(int64_t since, bool slim_form) {
    constexpr size_t kMaxPerReply = 5000;
    nlohmann::json list = nlohmann::json::array(), events = nlohmann::json::array();
    std::lock_guard lock(mutex);
    int64_t next = published;
    if (slim_form) {
      for (const auto& e : slim)
        if (e.seq > since) list.push_back(e.record);
      for (const auto& e : marks)
        if (e.seq > since) events.push_back(e.record);
    } else {
      for (const auto& e : recent) {
        if (e.seq <= since) continue;
        if (list.size() == kMaxPerReply) {
          next = e.seq - 1;
          break;
        }
        list.push_back(e.record);
      }
    }
    nlohmann::json out = {{"next", next}, {"records", std::move(list)}};
    if (slim_form) out["events"] = std::move(events);
    return out;
  }

  void routes() {
    server.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      const auto rendered = page();
      res.set_content(*rendered, "text/html; charset=utf-8");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      nlohmann::json step;
      int64_t at = 0;
      {
        std::lock_guard lock(mutex);
        if (metrics_cache && metrics_cache_at == published) {
          const auto cached = metrics_cache;
          res.set_content(*cached, "text/plain; version=0.0.4; charset=utf-8");
          return;
        }
        step = last_step;
        at = published;
      }
      const nlohmann::json telemetry = step.contains("telemetry") ? step["telemetry"] : nlohmann::json();
      auto text = std::make_shared<const std::string>(to_prometheus(step, telemetry));
      {
        std::lock_guard lock(mutex);
        if (at >= metrics_cache_at) metrics_cache = text, metrics_cache_at = at;
      }
      res.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
    });
    server.Get("/graph.json", [this](const httplib::Request&, httplib::Response& res) {
      std::shared_ptr<const std::string> text;
      {
        std::lock_guard lock(mutex);
        text = graph_text;
      }
      res.set_content(*text, "application/json");
    });
    server.Get("/records.json", [this](const httplib::Request& req, httplib::Response& res) {
      int64_t since = 0;
      if (req.has_param("since")) {
        const std::string text = req.get_param_value("since");
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), since);
        if (ec != std::errc() || end != text.data() + text.size() || since < 0) {
          res.status = 400;
          res.set_content("since must be a record count (0, or the \"next\" of the previous reply)\n", "text/plain");
          return;
        }
      }
      const bool slim_form = req.has_param("slim") && req.get_param_value("slim") == "1";
      res.set_content(records(since, slim_form).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
    });
    server.Get("/summary.json", [this](const httplib::Request&, httplib::Response& res) {
      Snapshot snap;
      {
        std::lock_guard lock(mutex);
        snap = snapshot_locked();
      }
      PipelineModel pipeline;
      std::string table;
      nlohmann::json out = {{"analysis", summary(snap, pipeline, table)}, {"graph_version", snap.graph_version}};
      out["table"] = table;
      out["warnings"] = nlohmann::json::array();
      res.set_content(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
    });
  }
};

LiveServer::LiveServer(LiveServerOptions options) : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  state_->options.report.live = true;
}

LiveServer::~LiveServer() { stop(); }

void LiveServer::start() {
  State& s = *state_;
  if (s.thread.joinable()) return;
  const std::string& host = s.options.host;
  if (!s.options.allow_remote && !is_loopback_host(host))
    throw ConfigError("live view on '" + host + "': not a loopback address, and the page shows the run's data to anyone who "
                      "can reach it; serve on 127.0.0.1 (and tunnel), or allow remote access explicitly");
  s.routes();
  s.server.new_task_queue = [] { return new httplib::ThreadPool(3); };  // a few threads: never steal the run's cores
  s.server.set_keep_alive_timeout(1);
  s.port = s.options.port == 0 ? s.server.bind_to_any_port(host) : (s.server.bind_to_port(host, s.options.port) ? s.options.port : -1);
  if (s.port <= 0)
    throw std::runtime_error("live view: cannot listen on " + host + ":" + std::to_string(s.options.port) +
                             " (in use, or not an address of this machine)");
  s.thread = std::thread([&s] { s.server.listen_after_bind(); });
  // stop() is only safe once the server runs (httplib ignores a stop before).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.server.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s.server.is_running()) {
    s.thread.detach();  // cannot be stopped safely; never happens in practice
    throw std::runtime_error("live view: the server did not start on " + host + ":" + std::to_string(s.port));
  }
  log::info("report", "live view at " + url());
}

void LiveServer::stop() {
  State& s = *state_;
  if (!s.thread.joinable()) return;
  s.server.stop();
  s.thread.join();
}

bool LiveServer::running() const { return state_->thread.joinable() && state_->server.is_running(); }

int LiveServer::port() const { return state_->port; }

std::string LiveServer::url() const {
  const std::string& host = state_->options.host;
  const bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(state_->port) + "/";
}

void LiveServer::publish(const nlohmann::json& record) {
  State& s = *state_;
  const bool step = record.is_object() && record.value("kind", "") == "step";
  std::lock_guard lock(s.mutex);
  const int64_t seq = ++s.published;
  if (step) {
    s.slim.push_back({seq, s.slimmer.slim(record)});
    s.thin_slim();
    if (auto mark = guard_mark(record); !mark.is_null()) s.marks.push_back({seq, std::move(mark)});
    s.last_step = record;
  } else if (auto mark = record.is_object() ? event_mark(record) : nlohmann::json(); !mark.is_null()) {
    s.marks.push_back({seq, std::move(mark)});
  }
  s.recent.push_back({seq, record});
  const size_t keep = std::max<size_t>(s.options.max_records, s.options.report.analysis.drain.window_steps + 1);
  while (s.recent.size() > keep) s.recent.pop_front();
}

void LiveServer::set_graph(const nlohmann::json& graph) {
  std::lock_guard lock(state_->mutex);
  if (graph == state_->graph) return;
  state_->graph = graph;
  state_->graph_text = std::make_shared<const std::string>(graph.dump());
  ++state_->graph_version;
}

}  // namespace dflow::report
