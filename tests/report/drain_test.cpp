// A draining edge raises one alarm, early enough to act, with the step at
// which it will be empty; flat and noisy edges raise none.
#include <doctest/doctest.h>

#include <random>

#include "fixture.hpp"
#include "report/drain_detector.hpp"

using namespace dflow::report;

namespace {
std::vector<DrainAlarm> replay(const std::vector<nlohmann::json>& records, DrainDetector& detector) {
  std::vector<DrainAlarm> alarms;
  for (const auto& r : records)
    if (r["kind"] == "step")
      for (auto& a : detector.observe(r["global_step"].get<int64_t>(), r["telemetry"])) alarms.push_back(std::move(a));
  return alarms;
}
}  // namespace

TEST_CASE("Report.DrainDetector.ASteadilyFallingEdgeRaisesExactlyOneAlarmWithTheProjectedStep") {
  // load.out->pad.in falls from 8 by 0.02 items/step: empty at step 400.
  const auto records = test::fixture_records({.steps = 350, .total_steps = 1000, .draining_edge = "load.out->pad.in", .alarms = false});
  DrainDetector detector({.window_steps = 50, .horizon_steps = 200});
  const auto alarms = replay(records, detector);
  REQUIRE(alarms.size() == 1);  // the ten other edges are flat and noisy
  const DrainAlarm& a = alarms[0];
  CHECK(a.edge == "load.out->pad.in");
  CHECK(a.projected_empty_step == doctest::Approx(400).epsilon(0.02));
  CHECK(a.global_step == doctest::Approx(200).epsilon(0.03));  // raised once empty is within the horizon
  CHECK(a.trend_items_per_step == doctest::Approx(-0.02).epsilon(0.1));
  CHECK(a.capacity == 8);
  CHECK(a.message.find("load.out->pad.in") != std::string::npos);
  CHECK(a.message.find(std::to_string(a.projected_empty_step)) != std::string::npos);
  const nlohmann::json record = a.to_record();
  CHECK(record["kind"] == "alarm");
  CHECK(record["projected_empty_step"] == a.projected_empty_step);
}

TEST_CASE("Report.DrainDetector.HorizonAndWindowAreHonoured") {
  const auto records = test::fixture_records({.steps = 390, .total_steps = 1000, .draining_edge = "load.out->pad.in", .alarms = false});
  DrainDetector near({.window_steps = 30, .horizon_steps = 50});
  const auto alarms = replay(records, near);
  REQUIRE(alarms.size() == 1);
  CHECK(alarms[0].projected_empty_step - alarms[0].global_step <= 50);
  CHECK(alarms[0].global_step >= 340);
}

TEST_CASE("Report.DrainDetector.FlatAndNoisyEdgesRaiseNone") {
  const auto records = test::fixture_records({.steps = 1000, .total_steps = 1000, .alarms = false, .seed = 11});
  DrainDetector detector;
  CHECK(replay(records, detector).empty());

  // A noisy edge that hovers near empty is starved, not draining.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0, 0.6);
  DrainDetector low;
  int alarms = 0;
  double area = 0;
  for (int step = 1; step <= 2000; ++step) {
    const double occ = std::clamp(0.5 + noise(rng), 0.0, 4.0);
    area += occ;
    nlohmann::json t = {{"elapsed_s", 1.0 * step},
                        {"edges", {{{"name", "a.out->b.in"}, {"capacity", 4}, {"token", false}, {"occupancy", 0},
                                    {"mean_occupancy", area / step}}}}};
    alarms += static_cast<int>(low.observe(step, t).size());
  }
  CHECK(alarms == 0);
}

TEST_CASE("Report.Trend.LeastSquaresIsExactOnALine") {
  std::vector<double> xs{1, 2, 3, 4}, ys{7, 5, 3, 1};
  auto t = fit_trend(xs, ys);
  REQUIRE(t);
  CHECK(t->slope == doctest::Approx(-2));
  CHECK(t->at(0) == doctest::Approx(9));
  CHECK(t->slope_t < -1e6);
  CHECK_FALSE(fit_trend(std::vector<double>{1, 1, 1}, std::vector<double>{1, 2, 3}));
}
