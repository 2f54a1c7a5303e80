#pragma once
// Alarms for a slowly draining edge, raised DURING a run: the metrics node
// feeds one telemetry snapshot per step; when the least-squares trend of an
// edge's occupancy over the last `window_steps` steps says it will be empty
// within `horizon_steps`, one alarm is raised for that edge (once per run).
// A draining prefetch queue is how a fast pipeline quietly turns into a slow
// one: the consumer ends up waiting on the producer, hours after the cause.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "report/trend.hpp"

namespace dflow::report {

struct DrainOptions {
  int window_steps = 50;        // points in the least-squares fit
  int horizon_steps = 200;      // alarm when the edge is projected empty within this many steps
  double min_drop_items = 0.5;  // the fitted line must fall at least this much over the window
  double min_slope_t = 4.0;     // and the fall must stand out of the noise (slope / its std. error)
  // and the edge must already be at most this share full: a queue drifting
  // from full to two-thirds full still has slack, one near empty does not.
  double max_occupancy_share = 0.5;
};

struct DrainAlarm {
  std::string edge;                  // telemetry edge name ("route.out->target[1].in" for one replica's edge)
  int64_t global_step = 0;           // when it was raised
  double trend_items_per_step = 0;   // negative
  double occupancy = 0;              // fitted now (items)
  int capacity = 0;
  int64_t projected_empty_step = 0;  // where the trend reaches zero
  std::string message;               // one line for the console
  // {"kind": "alarm", "alarm": "edge_draining", "global_step", "edge", ...}: a metrics.jsonl record.
  nlohmann::json to_record() const;
};

// The trend of one edge's occupancy as the detector judges it; the report uses
// it for "draining now". Returns nullopt when the edge is not draining.
std::optional<DrainAlarm> judge_drain(const std::string& edge, int capacity, std::span<const double> steps,
                                      std::span<const double> occupancy, const DrainOptions& options);

// Not thread-safe: one caller (the metrics node, which is serial).
class DrainDetector {
 public:
  explicit DrainDetector(DrainOptions options = {});
  // Token edges are ignored (a waiting token is an idle model, not queued work).
  std::vector<DrainAlarm> observe(int64_t global_step, const nlohmann::json& telemetry);
  const DrainOptions& options() const { return options_; }

 private:
  struct Window {
    std::deque<double> steps, occupancy;
  };
  DrainOptions options_;
  OccupancyIntervals intervals_;
  std::map<std::string, Window> windows_;
  std::set<std::string> alarmed_;
  int64_t last_step_ = -1;
};

}  // namespace dflow::report
