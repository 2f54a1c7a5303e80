#pragma once
// Invariant 3: every edge and every node is observable. Meters are updated by
// the shells under a tiny per-meter mutex (a few ns uncontended); a snapshot
// can be taken at any time from any thread (the metrics node takes one per step).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace dflow::graph {

using SteadyClock = std::chrono::steady_clock;

struct EdgeStats {
  std::string name;  // "from.port->to.port" ("route.out->target[1].in" for one replica's edge)
  int capacity = 0;
  bool token = false;
  int occupancy = 0;               // items waiting in the edge now
  int high_water = 0;              // most items ever waiting
  double mean_occupancy = 0;       // time-weighted since run start
  uint64_t items_passed = 0;       // items taken by the consumer
  double producer_blocked_s = 0;   // time the edge was full: its producer could not put
  double consumer_starved_s = 0;   // time the edge was empty: its consumer had nothing from it
};

struct NodeStats {
  std::string name;
  int replica = 0;
  int replicas = 1;
  uint64_t calls = 0;
  double busy_s = 0;  // time inside the body
  double max_s = 0;   // longest single call
  uint64_t errors = 0;
  // A node that waits inside its body on something outside the graph (a
  // feature source reading files another process still writes) says so:
  // the part of busy_s spent waiting, and how many items it has ready ahead
  // of its consumers (-1: the node reports none).
  double outside_wait_s = 0;
  uint64_t outside_waits = 0;  // calls that waited at all
  int64_t ready_ahead = -1;
};

struct TelemetrySnapshot {
  double elapsed_s = 0;  // since run start (0 before run)
  std::vector<EdgeStats> edges;
  std::vector<NodeStats> nodes;
};

nlohmann::json to_json(const TelemetrySnapshot& snapshot);

class EdgeMeter {
 public:
  EdgeMeter(std::string name, int capacity, bool token);
  void start(SteadyClock::time_point t);
  void on_put();   // an item entered the edge
  void on_take();  // its consumer took one
  int occupancy() const;
  EdgeStats stats(SteadyClock::time_point now) const;

 private:
  void advance(SteadyClock::time_point now);  // integrates up to now; mutex held
  const std::string name_;
  const int capacity_;
  const bool token_;
  mutable std::mutex mutex_;
  bool started_ = false;
  SteadyClock::time_point last_{};
  int occupancy_ = 0;  // invariant: 0 <= occupancy_ <= capacity_ (credits guarantee it)
  int high_water_ = 0;
  uint64_t items_passed_ = 0;
  double occupancy_area_ = 0;  // integral of occupancy over seconds
  double elapsed_s_ = 0;
  double full_s_ = 0;
  double empty_s_ = 0;
};

class NodeMeter {
 public:
  NodeMeter(std::string name, int replica, int replicas) : stats_{std::move(name), replica, replicas} {}
  void on_call(double seconds, bool failed);
  // Called by the body (NodeContext::meter): it waited `seconds` on an outside producer.
  void on_outside_wait(double seconds);
  void set_ready_ahead(int64_t items);
  NodeStats stats() const;

 private:
  mutable std::mutex mutex_;
  NodeStats stats_;
};

// Owns every meter of one pipeline; stable addresses (deque).
class TelemetryBoard {
 public:
  EdgeMeter& add_edge(std::string name, int capacity, bool token);
  NodeMeter& add_node(std::string name, int replica, int replicas);
  void start();  // run start: time origin of every meter
  TelemetrySnapshot snapshot() const;

 private:
  std::deque<EdgeMeter> edges_;
  std::deque<NodeMeter> nodes_;
  mutable std::mutex start_mutex_;
  bool started_ = false;
  SteadyClock::time_point start_{};
};

}  // namespace dflow::graph
