#pragma once
// Occupancy trends: the time-weighted occupancy of each edge between two
// telemetry snapshots, and a least-squares line through a window of them.
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflow::report {

struct Trend {
  double slope = 0;      // y units per x unit (items per step)
  double intercept = 0;  // y at x = 0
  double slope_t = 0;    // slope / its standard error; -inf/+inf for an exact line
  int points = 0;
  double at(double x) const { return intercept + slope * x; }
};

// Least squares through (xs[i], ys[i]); nullopt with fewer than 3 points or
// when every x is the same.
std::optional<Trend> fit_trend(std::span<const double> xs, std::span<const double> ys);

// Feeds on successive telemetry snapshots (graph::to_json) and returns each
// edge's mean occupancy over the interval since the previous one: exact from
// the meters' time-weighted means, unlike the instantaneous `occupancy`,
// which is sampled at the same phase of every step. The first snapshot (or
// the first after the meters restart, as on resume) gives the mean since start.
class OccupancyIntervals {
 public:
  struct Sample {
    std::string edge;
    int capacity = 0;
    bool token = false;
    double occupancy = 0;  // items, time-weighted over the interval
  };
  std::vector<Sample> observe(const nlohmann::json& telemetry);

 private:
  struct Last {
    double elapsed_s = 0;
    double area = 0;  // integral of occupancy over seconds since start
  };
  std::map<std::string, Last> last_;
};

}  // namespace dflow::report
