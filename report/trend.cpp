#include "report/trend.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dflow::report {

std::optional<Trend> fit_trend(std::span<const double> xs, std::span<const double> ys) {
  const size_t n = std::min(xs.size(), ys.size());
  if (n < 3) return std::nullopt;
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < n; ++i) mean_x += xs[i], mean_y += ys[i];
  mean_x /= n;
  mean_y /= n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (xs[i] - mean_x) * (xs[i] - mean_x);
    sxy += (xs[i] - mean_x) * (ys[i] - mean_y);
  }
  if (sxx <= 0) return std::nullopt;
  Trend t;
  t.points = static_cast<int>(n);
  t.slope = sxy / sxx;
  t.intercept = mean_y - t.slope * mean_x;
  double residual = 0;
  for (size_t i = 0; i < n; ++i) residual += std::pow(ys[i] - t.at(xs[i]), 2);
  const double slope_se = std::sqrt(residual / static_cast<double>(n - 2) / sxx);
  const double tiny = 1e-12 * (1 + std::abs(t.slope));
  t.slope_t = slope_se > tiny ? t.slope / slope_se
              : t.slope == 0  ? 0
                              : std::copysign(std::numeric_limits<double>::infinity(), t.slope);
  return t;
}

std::vector<OccupancyIntervals::Sample> OccupancyIntervals::observe(const nlohmann::json& telemetry) {
  std::vector<Sample> out;
  if (!telemetry.is_object() || !telemetry.contains("edges")) return out;
  const double elapsed_s = telemetry.value("elapsed_s", 0.0);
  for (const auto& e : telemetry["edges"]) {
    Sample s;
    s.edge = e.value("name", "");
    s.capacity = e.value("capacity", 0);
    s.token = e.value("token", false);
    const double now = e.value("occupancy", 0.0);
    const double mean = e.value("mean_occupancy", now);
    const double area = mean * elapsed_s;
    auto it = last_.find(s.edge);
    if (it == last_.end() || elapsed_s < it->second.elapsed_s) s.occupancy = elapsed_s > 0 ? mean : now;
    else if (elapsed_s - it->second.elapsed_s > 1e-9) s.occupancy = (area - it->second.area) / (elapsed_s - it->second.elapsed_s);
    else s.occupancy = now;
    s.occupancy = std::max(s.occupancy, 0.0);  // rounding in the meters' integrals
    if (s.capacity > 0) s.occupancy = std::min(s.occupancy, static_cast<double>(s.capacity));
    last_[s.edge] = {elapsed_s, area};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dflow::report
