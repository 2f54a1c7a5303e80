#include "report/drain_detector.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <vector>

namespace dflow::report {

nlohmann::json DrainAlarm::to_record() const {
  return {{"kind", "alarm"},
          {"alarm", "edge_draining"},
          {"global_step", global_step},
          {"edge", edge},
          {"trend_items_per_step", trend_items_per_step},
          {"occupancy", occupancy},
          {"capacity", capacity},
          {"projected_empty_step", projected_empty_step},
          {"message", message}};
}

std::optional<DrainAlarm> judge_drain(const std::string& edge, int capacity, std::span<const double> steps,
                                      std::span<const double> occupancy, const DrainOptions& options) {
  if (steps.empty() || static_cast<int>(steps.size()) < options.window_steps) return std::nullopt;
  auto trend = fit_trend(steps, occupancy);
  if (!trend || trend->slope >= 0 || trend->slope_t > -options.min_slope_t) return std::nullopt;
  const double span = steps.back() - steps.front();
  if (-trend->slope * span < options.min_drop_items) return std::nullopt;

  DrainAlarm alarm;
  alarm.edge = edge;
  alarm.global_step = static_cast<int64_t>(steps.back());
  alarm.trend_items_per_step = trend->slope;
  alarm.occupancy = std::max(0.0, trend->at(steps.back()));
  alarm.capacity = capacity;
  if (capacity > 0 && alarm.occupancy > options.max_occupancy_share * capacity) return std::nullopt;
  alarm.projected_empty_step = std::llround(-trend->intercept / trend->slope);
  std::ostringstream m;
  m << std::fixed << std::setprecision(3) << "edge " << edge << " is draining: " << trend->slope << " items/step over the last "
    << steps.size() << " steps (now " << std::setprecision(1) << alarm.occupancy << " of " << capacity << "); ";
  if (alarm.projected_empty_step <= alarm.global_step) m << "it is empty now";
  else m << "at this trend it is empty at step " << alarm.projected_empty_step;
  m << " and its consumer will wait on its producer";
  alarm.message = m.str();
  return alarm;
}

DrainDetector::DrainDetector(DrainOptions options) : options_(options) {
  if (options_.window_steps < 3) options_.window_steps = 3;
}

std::vector<DrainAlarm> DrainDetector::observe(int64_t global_step, const nlohmann::json& telemetry) {
  std::vector<DrainAlarm> alarms;
  if (global_step <= last_step_) windows_.clear();  // a resume rewound the steps: start the windows again
  last_step_ = global_step;
  const size_t window = static_cast<size_t>(options_.window_steps);
  for (auto& sample : intervals_.observe(telemetry)) {
    if (sample.token) continue;
    Window& w = windows_[sample.edge];
    w.steps.push_back(static_cast<double>(global_step));
    w.occupancy.push_back(sample.occupancy);
    while (w.steps.size() > window) w.steps.pop_front(), w.occupancy.pop_front();
    if (alarmed_.count(sample.edge)) continue;
    std::vector<double> xs(w.steps.begin(), w.steps.end()), ys(w.occupancy.begin(), w.occupancy.end());
    auto alarm = judge_drain(sample.edge, sample.capacity, xs, ys, options_);
    if (!alarm || alarm->projected_empty_step - global_step > options_.horizon_steps) continue;
    alarmed_.insert(sample.edge);
    alarms.push_back(std::move(*alarm));
  }
  return alarms;
}

}  // namespace dflow::report
