#include "report/analysis.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

namespace dflow::report {

namespace {

void add_node_loads(Analysis& a, const PipelineModel& pipeline, const nlohmann::json& telemetry) {
  for (const auto& n : pipeline.nodes) {
    NodeLoad load;
    load.name = n.name;
    load.type = n.type;
    load.replicas = n.replicas;
    load.compute = n.compute;
    load.when_bound = n.when_bound;
    a.nodes.push_back(std::move(load));
  }
  for (const auto& t : telemetry.value("nodes", nlohmann::json::array())) {
    auto it = std::find_if(a.nodes.begin(), a.nodes.end(), [&](const NodeLoad& n) { return n.name == t.value("name", ""); });
    if (it == a.nodes.end()) continue;
    const double busy_s = t.value("busy_s", 0.0);
    it->replicas = std::max(it->replicas, t.value("replicas", 1));
    it->calls += t.value("calls", uint64_t{0});
    it->errors += t.value("errors", uint64_t{0});
    it->busy_s += busy_s;
    it->max_s = std::max(it->max_s, t.value("max_s", 0.0));
    it->replica_busy_share.push_back(a.elapsed_s > 0 ? busy_s / a.elapsed_s : 0.0);
    if (t.contains("ready_ahead")) {
      it->ready_ahead = std::max<int64_t>(it->ready_ahead, 0) + t.value("ready_ahead", int64_t{0});
      it->outside_wait_s += t.value("outside_wait_s", 0.0);
    }
  }
  for (auto& n : a.nodes) {
    n.busy_share = a.elapsed_s > 0 ? n.busy_s / (n.replicas * a.elapsed_s) : 0.0;
    n.outside_wait_share = a.elapsed_s > 0 ? n.outside_wait_s / (n.replicas * a.elapsed_s) : 0.0;
  }
}

void add_edge_loads(Analysis& a, const PipelineModel& pipeline, const nlohmann::json& telemetry) {
  for (const auto& e : pipeline.edges) {
    EdgeLoad load;
    load.name = e.name;
    load.from = e.from;
    load.to = e.to;
    load.token = e.token;
    a.edges.push_back(std::move(load));
  }
  for (const auto& t : telemetry.value("edges", nlohmann::json::array())) {
    const std::string declared = declared_edge_name(t.value("name", ""));
    auto it = std::find_if(a.edges.begin(), a.edges.end(), [&](const EdgeLoad& e) { return e.name == declared; });
    if (it == a.edges.end()) continue;
    EdgePieceLoad p;
    p.name = t.value("name", "");
    p.capacity = t.value("capacity", 0);
    p.occupancy = t.value("occupancy", 0);
    p.high_water = t.value("high_water", 0);
    p.items = t.value("items_passed", uint64_t{0});
    p.mean_occupancy = t.value("mean_occupancy", 0.0);
    p.producer_blocked_s = t.value("producer_blocked_s", 0.0);
    p.consumer_starved_s = t.value("consumer_starved_s", 0.0);
    p.blocked_share = a.elapsed_s > 0 ? p.producer_blocked_s / a.elapsed_s : 0.0;
    p.starved_share = a.elapsed_s > 0 ? p.consumer_starved_s / a.elapsed_s : 0.0;
    it->pieces.push_back(std::move(p));
  }
  for (auto& e : a.edges) {
    for (const auto& p : e.pieces) {
      e.capacity += p.capacity;
      e.mean_occupancy += p.mean_occupancy;
      e.high_water = std::max(e.high_water, p.high_water);
      e.blocked_share += p.blocked_share / e.pieces.size();
      e.starved_share += p.starved_share / e.pieces.size();
    }
  }
}

void find_bottleneck(Analysis& a, const AnalysisOptions& options) {
  auto busiest = std::max_element(a.nodes.begin(), a.nodes.end(),
                                  [](const NodeLoad& x, const NodeLoad& y) { return x.busy_share < y.busy_share; });
  if (busiest == a.nodes.end() || busiest->busy_share < options.bound_share) return;
  Bottleneck b;
  b.node = busiest->name;
  b.type = busiest->type;
  b.compute = busiest->compute;
  b.when_bound = busiest->when_bound;
  b.busy_share = busiest->busy_share;
  for (const auto& e : a.edges) {
    if (e.token || e.pieces.empty()) continue;
    const double fill = e.capacity > 0 ? e.mean_occupancy / e.capacity : 0.0;
    if (e.to == b.node && (e.blocked_share >= options.full_share || fill >= 0.75)) b.full_inputs.push_back(e.name);
    if (e.from == b.node && e.starved_share >= options.starved_share) b.starved_outputs.push_back(e.name);
  }
  a.bottleneck = std::move(b);
}

// Interval occupancy of every non-token edge over the last window of steps.
void find_draining(Analysis& a, const std::vector<nlohmann::json>& steps, const AnalysisOptions& options) {
  const size_t window = static_cast<size_t>(std::max(options.drain.window_steps, 3));
  OccupancyIntervals intervals;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> series;  // edge -> (steps, occupancy)
  std::map<std::string, int> capacity;
  // Start one snapshot before the window: the first interval needs its predecessor.
  const size_t first = steps.size() > window + 1 ? steps.size() - window - 1 : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    const auto& r = steps[i];
    if (!r.contains("telemetry")) continue;
    const double step = r.value("global_step", 0.0);
    for (const auto& s : intervals.observe(r["telemetry"])) {
      if (s.token || (i == first && first > 0)) continue;
      series[s.edge].first.push_back(step);
      series[s.edge].second.push_back(s.occupancy);
      capacity[s.edge] = s.capacity;
    }
  }
  for (const auto& [edge, xy] : series)
    if (auto alarm = judge_drain(edge, capacity[edge], xy.first, xy.second, options.drain)) a.draining.push_back(*alarm);
}

}  // namespace

Analysis analyze(const PipelineModel& pipeline, const std::vector<nlohmann::json>& steps, const AnalysisOptions& options) {
  Analysis a;
  const nlohmann::json* telemetry = nullptr;
  for (auto it = steps.rbegin(); it != steps.rend() && !telemetry; ++it)
    if (it->contains("telemetry") && (*it)["telemetry"].is_object()) {
      telemetry = &(*it)["telemetry"];
      a.global_step = it->value("global_step", int64_t{0});
      a.total_steps = it->value("total_steps", int64_t{0});
    }
  static const nlohmann::json empty = nlohmann::json::object();
  a.has_telemetry = telemetry != nullptr;
  if (!telemetry) telemetry = &empty;
  a.elapsed_s = telemetry->value("elapsed_s", 0.0);
  add_node_loads(a, pipeline, *telemetry);
  add_edge_loads(a, pipeline, *telemetry);
  if (a.has_telemetry) {
    find_bottleneck(a, options);
    find_draining(a, steps, options);
  }
  a.summary = describe_findings(a, options);
  return a;
}

Analysis analyze(const RunData& run, const AnalysisOptions& options) {
  Analysis a = analyze(pipeline_model(run.graph, run.last_telemetry()), run.steps, options);
  // Evaluations run off the training loop: how long each waited for a
  // thread after its snapshot, beside how long it ran.
  int count = 0;
  double waited = 0, ran = 0, longest = -1;
  int64_t longest_step = 0;
  for (const auto& e : run.events) {
    if (e.value("kind", "") != "eval" || !e.contains("time") || !e["time"].contains("waited_s")) continue;
    const double w = e["time"].value("waited_s", 0.0);
    ++count, waited += w, ran += e["time"].value("eval_s", 0.0);
    if (w > longest) longest = w, longest_step = e.value("global_step", int64_t{0});
  }
  if (count > 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "evaluation: %d evaluation(s) waited %.1f s on average for a thread after their snapshot (longest "
                  "%.1f s, step %lld) and ran %.1f s on average",
                  count, waited / count, longest, static_cast<long long>(longest_step), ran / count);
    a.summary.push_back(line);
  }
  return a;
}

nlohmann::json Analysis::to_json() const {
  nlohmann::json out = {{"global_step", global_step}, {"total_steps", total_steps}, {"elapsed_s", elapsed_s},
                        {"has_telemetry", has_telemetry}, {"summary", summary}};
  out["nodes"] = nlohmann::json::array();
  for (const auto& n : nodes) {
    out["nodes"].push_back({{"name", n.name}, {"type", n.type}, {"replicas", n.replicas}, {"calls", n.calls},
                            {"errors", n.errors}, {"busy_s", n.busy_s}, {"busy_share", n.busy_share}, {"max_s", n.max_s},
                            {"replica_busy_share", n.replica_busy_share}});
    if (n.waits_outside()) {
      out["nodes"].back()["ready_ahead"] = n.ready_ahead;
      out["nodes"].back()["outside_wait_s"] = n.outside_wait_s;
      out["nodes"].back()["outside_wait_share"] = n.outside_wait_share;
    }
  }
  out["edges"] = nlohmann::json::array();
  for (const auto& e : edges) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& p : e.pieces)
      pieces.push_back({{"name", p.name}, {"capacity", p.capacity}, {"mean_occupancy", p.mean_occupancy},
                        {"blocked_share", p.blocked_share}, {"starved_share", p.starved_share}});
    out["edges"].push_back({{"name", e.name}, {"from", e.from}, {"to", e.to}, {"token", e.token}, {"capacity", e.capacity},
                            {"mean_occupancy", e.mean_occupancy}, {"high_water", e.high_water},
                            {"blocked_share", e.blocked_share}, {"starved_share", e.starved_share}, {"pieces", pieces}});
  }
  out["bottleneck"] = nullptr;
  if (bottleneck)
    out["bottleneck"] = {{"node", bottleneck->node}, {"busy_share", bottleneck->busy_share},
                         {"full_inputs", bottleneck->full_inputs}, {"starved_outputs", bottleneck->starved_outputs}};
  out["draining"] = nlohmann::json::array();
  for (const auto& d : draining) out["draining"].push_back(d.to_record());
  return out;
}

}  // namespace dflow::report
