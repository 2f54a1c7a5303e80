#include "graph/telemetry.hpp"

#include <algorithm>

namespace dflow::graph {

namespace {
double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

EdgeMeter::EdgeMeter(std::string name, int capacity, bool token) : name_(std::move(name)), capacity_(capacity), token_(token) {}

void EdgeMeter::start(SteadyClock::time_point t) {
  std::lock_guard lock(mutex_);
  started_ = true;
  last_ = t;
}

void EdgeMeter::advance(SteadyClock::time_point now) {
  if (!started_ || now <= last_) return;
  double dt = seconds(now - last_);
  last_ = now;
  elapsed_s_ += dt;
  occupancy_area_ += occupancy_ * dt;
  if (occupancy_ >= capacity_) full_s_ += dt;
  if (occupancy_ == 0) empty_s_ += dt;
}

void EdgeMeter::on_put() {
  auto now = SteadyClock::now();
  std::lock_guard lock(mutex_);
  advance(now);
  ++occupancy_;
  high_water_ = std::max(high_water_, occupancy_);
}

void EdgeMeter::on_take() {
  auto now = SteadyClock::now();
  std::lock_guard lock(mutex_);
  advance(now);
  --occupancy_;
  ++items_passed_;
}

int EdgeMeter::occupancy() const {
  std::lock_guard lock(mutex_);
  return occupancy_;
}

EdgeStats EdgeMeter::stats(SteadyClock::time_point now) const {
  std::lock_guard lock(mutex_);
  // Extend the integrals to `now` without changing the meter.
  double dt = started_ && now > last_ ? seconds(now - last_) : 0;
  double elapsed_s = elapsed_s_ + dt;
  EdgeStats s;
  s.name = name_;
  s.capacity = capacity_;
  s.token = token_;
  s.occupancy = occupancy_;
  s.high_water = high_water_;
  s.mean_occupancy = elapsed_s > 0 ? (occupancy_area_ + occupancy_ * dt) / elapsed_s : occupancy_;
  s.items_passed = items_passed_;
  s.producer_blocked_s = full_s_ + (occupancy_ >= capacity_ ? dt : 0);
  s.consumer_starved_s = empty_s_ + (occupancy_ == 0 ? dt : 0);
  return s;
}

void NodeMeter::on_call(double seconds_in_body, bool failed) {
  std::lock_guard lock(mutex_);
  ++stats_.calls;
  stats_.busy_s += seconds_in_body;
  stats_.max_s = std::max(stats_.max_s, seconds_in_body);
  if (failed) ++stats_.errors;
}

void NodeMeter::on_outside_wait(double seconds_waited) {
  std::lock_guard lock(mutex_);
  stats_.outside_wait_s += seconds_waited;
  if (seconds_waited > 0) ++stats_.outside_waits;
}

void NodeMeter::set_ready_ahead(int64_t items) {
  std::lock_guard lock(mutex_);
  stats_.ready_ahead = items;
}

NodeStats NodeMeter::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

EdgeMeter& TelemetryBoard::add_edge(std::string name, int capacity, bool token) {
  return edges_.emplace_back(std::move(name), capacity, token);
}

NodeMeter& TelemetryBoard::add_node(std::string name, int replica, int replicas) {
  return nodes_.emplace_back(std::move(name), replica, replicas);
}

void TelemetryBoard::start() {
  auto now = SteadyClock::now();
  {
    std::lock_guard lock(start_mutex_);
    started_ = true;
    start_ = now;
  }
  for (auto& e : edges_) e.start(now);
}

TelemetrySnapshot TelemetryBoard::snapshot() const {
  auto now = SteadyClock::now();
  TelemetrySnapshot out;
  {
    std::lock_guard lock(start_mutex_);
    out.elapsed_s = started_ ? seconds(now - start_) : 0;
  }
  for (const auto& e : edges_) out.edges.push_back(e.stats(now));
  for (const auto& n : nodes_) out.nodes.push_back(n.stats());
  return out;
}

nlohmann::json to_json(const TelemetrySnapshot& snapshot) {
  nlohmann::json edges = nlohmann::json::array(), nodes = nlohmann::json::array();
  for (const auto& e : snapshot.edges)
    edges.push_back({{"name", e.name}, {"capacity", e.capacity}, {"token", e.token}, {"occupancy", e.occupancy},
                     {"high_water", e.high_water}, {"mean_occupancy", e.mean_occupancy}, {"items_passed", e.items_passed},
                     {"producer_blocked_s", e.producer_blocked_s}, {"consumer_starved_s", e.consumer_starved_s}});
  for (const auto& n : snapshot.nodes) {
    nlohmann::json node = {{"name", n.name}, {"replica", n.replica}, {"replicas", n.replicas}, {"calls", n.calls},
                           {"busy_s", n.busy_s}, {"max_s", n.max_s}, {"errors", n.errors}};
    if (n.ready_ahead >= 0) {  // only nodes that wait on an outside producer report these
      node["outside_wait_s"] = n.outside_wait_s;
      node["outside_waits"] = n.outside_waits;
      node["ready_ahead"] = n.ready_ahead;
    }
    nodes.push_back(std::move(node));
  }
  return {{"elapsed_s", snapshot.elapsed_s}, {"edges", edges}, {"nodes", nodes}};
}

}  // namespace dflow::graph
