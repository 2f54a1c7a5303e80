#include "test_paths.hpp"
#include "fixture.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numbers>
#include <random>

#include "report/drain_detector.hpp"

namespace dflow::report::test {

namespace fs = std::filesystem;

fs::path build_dir() { return fs::path(::dflow::testing::dflow_binary()).parent_path(); }

fs::path fresh_dir(const std::string& name) {
  fs::path dir = build_dir() / "test-report" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

nlohmann::json default_graph(int target_replicas, const std::string& target_type, bool target_compute,
                             const std::string& target_when_bound) {
  auto port = [](const char* name, const char* type, bool routed = false) {
    return nlohmann::json{{"name", name}, {"type", type}, {"ordered", false}, {"routed", routed}, {"optional", false}};
  };
  auto node = [](const char* name, const char* type, const char* kind, int replicas, nlohmann::json in, nlohmann::json out,
                 bool compute = false, const std::string& when_bound = "") {
    return nlohmann::json{{"name", name}, {"type", type}, {"kind", kind}, {"replicas", replicas},
                          {"description", std::string("the ") + type + " node"}, {"inputs", in}, {"outputs", out},
                          {"join_ports", 2}, {"compute", compute}, {"when_bound", when_bound}};
  };
  nlohmann::json nodes = {
      node("load", "load.shards", "source", 1, nlohmann::json::array(), {port("out", "PlannedBatch")}),
      node("pad", "pad_bucket.token_budget", "function", 1, {port("in", "PlannedBatch")}, {port("out", "PaddedBatch")}),
      node("route", "route.least_loaded", "router", 1, {port("in", "PaddedBatch")}, {port("out", "PaddedBatch", true)}),
      node("target", target_type.c_str(), "function", target_replicas, {port("in", "PaddedBatch")}, {port("out", "ContextFeatures")},
           target_compute, target_when_bound),
      node("reorder", "reorder", "function", 1, {port("in", "ContextFeatures")}, {port("out", "ContextFeatures")}),
      node("drafter", "drafter_step", "function", 1, {port("batch", "ContextFeatures"), port("token", "ModelToken")},
           {port("out", "MicroStep")}, /*compute=*/true),
      node("accumulate", "accumulate", "function", 1, {port("in", "MicroStep")}, {port("token", "ModelToken"), port("step", "StepGrads")}),
      node("optimizer", "optimizer_step.adamw", "function", 1, {port("in", "StepGrads")},
           {port("token", "ModelToken"), port("record", "StepRecord"), port("snapshot", "Snapshot")}),
      node("metrics", "metric_sample", "function", 1, {port("in", "StepRecord")}, nlohmann::json::array()),
      node("checkpoint", "checkpoint.async", "function", 1, {port("in", "Snapshot")}, nlohmann::json::array())};
  auto edge = [](std::string from, std::string to, int capacity, bool token = false, int initial = 0, bool routed = false) {
    return nlohmann::json{{"name", from + "->" + to}, {"from", from}, {"to", to}, {"type", "*"}, {"capacity", capacity},
                          {"token", token}, {"initial", initial}, {"routed", routed}, {"ordered", false},
                          {"credit_taker", from.substr(0, from.find('.'))}};
  };
  nlohmann::json edges = {edge("load.out", "pad.in", 8),
                          edge("pad.out", "route.in", 4),
                          edge("route.out", "target.in", 2, false, 0, true),
                          edge("target.out", "reorder.in", 4),
                          edge("reorder.out", "drafter.batch", 2),
                          edge("drafter.out", "accumulate.in", 2),
                          edge("accumulate.token", "drafter.token", 1, true),
                          edge("accumulate.step", "optimizer.in", 1),
                          edge("optimizer.token", "drafter.token", 1, true, 1),
                          edge("optimizer.record", "metrics.in", 16),
                          edge("optimizer.snapshot", "checkpoint.in", 1)};
  return {{"nodes", nodes}, {"edges", edges}};
}

namespace {

struct EdgeSim {
  std::string name;
  int capacity = 0;
  bool token = false;
  double fill = 0;  // typical share of capacity occupied
  double area = 0, blocked_s = 0, starved_s = 0;
  int high_water = 0;
  uint64_t items = 0;
};

struct NodeSim {
  std::string name;
  int replica = 0, replicas = 1;
  double share = 0.05;  // busy share
  int calls_per_step = 1;
  uint64_t calls = 0;
  double busy_s = 0, max_s = 0;
};

// Telemetry edges as the builder names them: one per replica for a routed edge.
int node_position(const nlohmann::json& graph, const std::string& name) {
  for (size_t i = 0; i < graph["nodes"].size(); ++i)
    if (graph["nodes"][i]["name"] == name) return static_cast<int>(i);
  return -1;
}

// Telemetry edges as the builder names them: one per replica for a routed edge.
std::vector<EdgeSim> make_edges(const nlohmann::json& graph, const std::string& bound) {
  std::vector<EdgeSim> out;
  const int bound_at = node_position(graph, bound);
  for (const auto& e : graph["edges"]) {
    const std::string name = e["name"], to = e["to"];
    const std::string to_node = to.substr(0, to.find('.'));
    const int to_at = node_position(graph, to_node);
    // The pipeline is a chain: upstream of the bound node work waits (full);
    // downstream of it, consumers wait (nearly empty).
    const double fill = e["token"] ? 0.4 : to_at <= bound_at ? 0.93 : 0.05;
    if (e["routed"]) {
      const size_t at = name.find("->") + 2 + to_node.size();
      for (int r = 0; r < graph["nodes"][to_at]["replicas"].get<int>(); ++r)
        out.push_back({name.substr(0, at) + "[" + std::to_string(r) + "]" + name.substr(at), e["capacity"], false, fill});
    } else {
      out.push_back({name, e["capacity"], e["token"], fill});
    }
  }
  return out;
}

std::vector<NodeSim> make_nodes(const nlohmann::json& graph, const std::string& bound) {
  static const std::map<std::string, double> shares = {{"load", 0.10}, {"pad", 0.15}, {"route", 0.02}, {"target", 0.60},
                                                       {"reorder", 0.01}, {"drafter", 0.55}, {"accumulate", 0.02},
                                                       {"optimizer", 0.08}, {"metrics", 0.01}, {"checkpoint", 0.04}};
  std::vector<NodeSim> out;
  for (const auto& n : graph["nodes"]) {
    const std::string name = n["name"];
    const int replicas = n["replicas"];
    const bool per_micro = name != "optimizer" && name != "metrics" && name != "checkpoint";
    for (int r = 0; r < replicas; ++r)
      out.push_back({name, r, replicas, name == bound ? 0.95 : shares.at(name), per_micro ? std::max(1, 2 / replicas) : 1});
  }
  return out;
}

nlohmann::json telemetry(const std::vector<EdgeSim>& edges, const std::vector<NodeSim>& nodes, double elapsed_s,
                         const std::vector<double>& occupancy_now) {
  nlohmann::json e = nlohmann::json::array(), n = nlohmann::json::array();
  for (size_t i = 0; i < edges.size(); ++i) {
    const auto& x = edges[i];
    e.push_back({{"name", x.name}, {"capacity", x.capacity}, {"token", x.token},
                 {"occupancy", static_cast<int>(std::lround(occupancy_now[i]))}, {"high_water", x.high_water},
                 {"mean_occupancy", x.area / elapsed_s}, {"items_passed", x.items}, {"producer_blocked_s", x.blocked_s},
                 {"consumer_starved_s", x.starved_s}});
  }
  for (const auto& x : nodes)
    n.push_back({{"name", x.name}, {"replica", x.replica}, {"replicas", x.replicas}, {"calls", x.calls}, {"busy_s", x.busy_s},
                 {"max_s", x.max_s}, {"errors", 0}});
  return {{"elapsed_s", elapsed_s}, {"edges", e}, {"nodes", n}};
}

}  // namespace

std::vector<nlohmann::json> fixture_records(const FixtureOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::uniform_int_distribution<int> bucket(0, 2);
  const nlohmann::json graph = default_graph(o.target_replicas, o.target_type, o.target_compute, o.target_when_bound);
  std::vector<EdgeSim> edges = make_edges(graph, o.bound);
  std::vector<NodeSim> nodes = make_nodes(graph, o.bound);
  DrainDetector detector;
  std::vector<nlohmann::json> out;
  double elapsed_s = 0;
  for (int step = 1; step <= o.steps; ++step) {
    const double dt = 0.5 * (1 + 0.05 * noise(rng));
    elapsed_s += dt;
    std::vector<double> now(edges.size());
    for (size_t i = 0; i < edges.size(); ++i) {
      EdgeSim& e = edges[i];
      double occ = e.name == o.draining_edge ? o.drain_start + o.drain_slope * step + 0.1 * noise(rng)
                                             : e.fill * e.capacity + 0.12 * e.capacity * noise(rng);
      occ = std::clamp(occ, 0.0, static_cast<double>(e.capacity));
      const double fill = occ / e.capacity;
      now[i] = occ;
      e.area += occ * dt;
      e.blocked_s += (fill > 0.8 ? 0.85 * fill : 0.1 * fill) * dt;
      e.starved_s += (fill < 0.2 ? 0.9 * (1 - fill) : 0.2 * (1 - fill)) * dt;
      e.high_water = std::max(e.high_water, static_cast<int>(std::ceil(occ)));
      e.items += e.token ? 1 : 2;
    }
    for (auto& n : nodes) {
      const double busy = std::clamp(n.share * (1 + 0.02 * noise(rng)), 0.0, 1.0) * dt;
      n.calls += n.calls_per_step;
      n.busy_s += busy;
      n.max_s = std::max(n.max_s, 1.3 * busy / n.calls_per_step);
    }
    const int epoch = (step - 1) / o.steps_per_epoch;
    const bool skipped = step == o.guard_skip_step;
    const double loss = 6.0 * std::exp(-step / 150.0) + 1.5 + 0.05 * noise(rng);
    nlohmann::json acc = nlohmann::json::array();
    for (int k = 1; k <= 15; ++k) acc.push_back(std::max(0.0, (0.8 - 0.045 * k) * (1 - std::exp(-step / 80.0))));
    std::vector<int> buckets(3, 0);
    buckets[bucket(rng)]++, buckets[bucket(rng)]++;
    const int real = 3000 + static_cast<int>(200 * noise(rng));
    const double warm = 12;
    const double lr = step < warm ? 3e-3 * step / warm
                                  : 3e-3 * 0.5 * (1 + std::cos(std::numbers::pi * (step - warm) / (o.total_steps - warm)));
    nlohmann::json r = {{"kind", "step"}, {"epoch", epoch}, {"step_in_epoch", step - epoch * o.steps_per_epoch},
                        {"steps_per_epoch", o.steps_per_epoch},
                        {"epoch_progress", static_cast<double>(step - epoch * o.steps_per_epoch) / o.steps_per_epoch},
                        {"global_step", step}, {"total_steps", o.total_steps},
                        {"run_progress", static_cast<double>(step) / o.total_steps}, {"loss_weight", 412.0},
                        {"accuracy_per_position", acc}, {"lr", lr}, {"micro_batches", 2}, {"anchors", 64},
                        {"real_tokens", real}, {"padded_tokens", 4096}, {"padding_efficiency", real / 4096.0},
                        {"batches_per_bucket", buckets}};
    r["loss"] = skipped ? nlohmann::json("nan") : nlohmann::json(loss);
    // Per-bucket statistics as the optimizer writes them (keyed by bucket length).
    const int lengths[3] = {64, 128, 256};
    r["buckets"] = nlohmann::json::object();
    for (int b = 0; b < 3; ++b)
      if (buckets[b] > 0)
        r["buckets"][std::to_string(lengths[b])] = {{"batches", buckets[b]}, {"loss", loss * (0.9 + 0.1 * b)},
                                                    {"real_tokens", real / 2}};
    // One long-sequence bucket's gradient, as recorded on single-bucket steps.
    if (buckets[2] == 2) r["buckets"]["256"]["grad_norm"] = 1.1;
    r["grad_norm"] = skipped ? nlohmann::json("nan") : nlohmann::json(0.8 + 0.3 * std::abs(noise(rng)));
    r["guard"] = skipped ? nlohmann::json{{"action", "skipped"}, {"reason", "non-finite loss"}, {"sample_ids", {17, 4242}}}
                         : nlohmann::json{{"action", "applied"}, {"reason", ""}};
    r["time"] = {{"step_s", dt}, {"elapsed_s", elapsed_s}, {"tokens_per_s", real / dt},
                 {"eta_s", elapsed_s / step * (o.total_steps - step)}};
    r["telemetry"] = telemetry(edges, nodes, elapsed_s, now);
    out.push_back(r);
    if (o.alarms)
      for (const auto& alarm : detector.observe(step, r["telemetry"])) out.push_back(alarm.to_record());
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0)
      out.push_back({{"kind", "checkpoint"}, {"global_step", step}, {"path", "checkpoints/step-" + std::to_string(step)}});
  }
  return out;
}

void write_fixture_run(const fs::path& dir, const FixtureOptions& options) {
  fs::create_directories(dir);
  std::ofstream metrics(dir / "metrics.jsonl");
  for (const auto& record : fixture_records(options)) {
    metrics << record.dump() << "\n";
    if (record["kind"] == "checkpoint") fs::create_directories(dir / "checkpoints" / ("step-" + std::to_string(record["global_step"].get<int>())));
  }
  if (options.write_graph) std::ofstream(dir / "graph.json") << default_graph(options.target_replicas, options.target_type, options.target_compute,
                                                                         options.target_when_bound).dump(2) << "\n";
}

}  // namespace dflow::report::test
