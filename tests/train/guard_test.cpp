// The stability guard's decisions on its own.
#include <doctest/doctest.h>

#include <cmath>

#include "train/guard.hpp"

using dflow::train::StabilityGuard;

namespace {
dflow::config::GuardConfig guard_config(const std::string& policy) {
  dflow::config::GuardConfig c;
  c.policy = policy;
  c.window = 32;
  c.z_threshold = 6;
  c.warmup_steps = 8;
  return c;
}
void feed(StabilityGuard& g, int steps) {
  for (int i = 0; i < steps; ++i) g.record_applied(2.0 + 0.01 * (i % 5), 1.0 + 0.02 * (i % 3));
}
}  // namespace

TEST_CASE("Guard.Skip.catches_non_finite_and_spikes_after_warmup") {
  StabilityGuard g(guard_config("skip"));
  CHECK(g.check(1e6, 1.0).apply);  // no baseline yet: nothing is a spike
  feed(g, 20);
  CHECK(g.check(2.02, 1.01).apply);
  auto nan = g.check(std::nan(""), 1.0);
  CHECK_FALSE(nan.apply);
  CHECK(nan.kind == "non_finite");
  CHECK(nan.action == "skipped");
  auto spike = g.check(50.0, 1.0);
  CHECK_FALSE(spike.apply);
  CHECK(spike.kind == "spike");
  CHECK(spike.metric == "loss");
  CHECK(spike.threshold < 50.0);
  CHECK(spike.reason().find("loss 50 > spike threshold") == 0);
  CHECK_FALSE(g.check(2.0, 40.0).apply);  // a grad-norm spike
}

TEST_CASE("Guard.Policies.none_applies_everything_halt_only_non_finite") {
  StabilityGuard none(guard_config("none")), halt(guard_config("halt"));
  feed(none, 20);
  feed(halt, 20);
  CHECK(none.check(std::nan(""), 1.0).apply);
  CHECK(none.check(50.0, 1.0).apply);
  CHECK(halt.check(50.0, 1.0).apply);
  auto v = halt.check(2.0, INFINITY);
  CHECK(v.halt);
  CHECK(v.action == "halted");
}

TEST_CASE("Guard.State.round_trips_so_a_resumed_run_decides_the_same") {
  StabilityGuard a(guard_config("skip")), b(guard_config("skip"));
  feed(a, 20);
  b.restore(a.state());
  for (double loss : {2.0, 2.5, 3.0, 10.0, 50.0}) CHECK(a.check(loss, 1.0).apply == b.check(loss, 1.0).apply);
}

TEST_CASE("Guard.Skip.ordinary_wobble_of_a_tight_baseline_is_applied") {
  // Late in a run grad norms cluster tightly; a 7% rise is not a spike.
  StabilityGuard g(guard_config("skip"));
  for (int i = 0; i < 30; ++i) g.record_applied(3.0, 1.30 + 0.001 * (i % 3));
  CHECK(g.check(3.0, 1.39).apply);
  CHECK(g.check(3.2, 1.30).apply);
  CHECK_FALSE(g.check(3.0, 5.0).apply);
}
