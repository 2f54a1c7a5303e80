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
dflow::train::GuardSignal signal(double loss) { return dflow::train::GuardSignal{loss, 1.0, false, {}}; }
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

TEST_CASE("Guard.Quarantine.skips_and_asks_for_the_samples_to_be_recorded") {
  StabilityGuard g(guard_config("quarantine"));
  feed(g, 20);
  auto spike = g.check(50.0, 1.0);
  CHECK_FALSE(spike.apply);
  CHECK(spike.quarantine);
  CHECK(spike.action == "quarantined");
  CHECK(g.check(2.01, 1.0).apply);
}

TEST_CASE("Guard.Rollback.a_cliff_is_cliff_steps_high_losses_in_a_row") {
  auto config = guard_config("rollback");
  config.cliff_steps = 3;
  config.cliff_z_threshold = 3;
  config.max_rollbacks = 1;
  StabilityGuard g(config);
  feed(g, 20);
  const auto saved = g.state();
  // 3.0 is above the cliff threshold (about 2.6) but below the spike threshold (about 3.2): applied.
  auto first = g.decide(signal(3.0));
  CHECK(first.apply);
  CHECK(first.above_cliff);
  CHECK(g.decide(signal(2.0)).apply);  // back to normal: the count starts over
  CHECK(g.cliff_run() == 0);
  CHECK(g.decide(signal(3.0)).apply);
  CHECK(g.decide(signal(50.0)).action == "skipped");  // a spike is skipped, and counts
  auto cliff = g.decide(signal(3.0));
  CHECK(cliff.kind == "cliff");
  CHECK(cliff.rollback);
  CHECK(cliff.action == "rolled_back");
  CHECK(cliff.reason().find("> cliff threshold") != std::string::npos);
  g.restore_after_rollback(saved, g.rollbacks() + 1);
  CHECK(g.rollbacks() == 1);
  CHECK(g.cliff_run() == 0);
  for (int i = 0; i < 2; ++i) g.decide(signal(3.0));
  auto last = g.decide(signal(3.0));  // rollbacks are used up: halt
  CHECK(last.halt);
  CHECK(last.action == "halted");
}

TEST_CASE("Guard.PerBucket.a_bucket_spike_hidden_in_the_step_mean_is_caught") {
  auto config = guard_config("skip");
  config.per_bucket = true;
  StabilityGuard g(config), plain(guard_config("skip"));
  for (int i = 0; i < 20; ++i) {
    dflow::train::GuardSignal s{2.0 + 0.01 * (i % 5), 1.0, false, {{64, 1.0 + 0.01 * (i % 5)}, {128, 3.0}}};
    g.record_applied(s);
    plain.record_applied(s);
  }
  // The 64 bucket doubles; the step's loss barely moves.
  dflow::train::GuardSignal step{2.3, 1.0, false, {{64, 2.0}, {128, 3.0}}};
  auto v = g.decide(step);
  CHECK_FALSE(v.apply);
  CHECK(v.metric == "loss@64");
  CHECK(plain.decide(step).apply);
  dflow::train::StabilityGuard restored(config);
  restored.restore(g.state());
  CHECK(restored.decide(step).metric == "loss@64");
}

TEST_CASE("Guard.Skip.a_rise_that_lasts_is_a_new_level_not_a_spike") {
  // Early in training the grad norm can climb several-fold while the loss
  // falls. Skipping every such step would stop training for good (skipped
  // steps never reach the baseline); a run of rebaseline_after() spikes in a
  // row on one metric is taken as that metric's new level instead.
  StabilityGuard g(guard_config("skip"));
  feed(g, 20);
  REQUIRE(g.rebaseline_after() == 4);  // max(4, warmup 8 / 4)
  auto risen = [](int i) { return dflow::train::GuardSignal{1.9, 3.0 + 0.05 * (i % 3), false, {}}; };
  for (int i = 0; i < 3; ++i) {
    auto v = g.decide(risen(i));
    CHECK_FALSE(v.apply);
    CHECK(v.kind == "spike");
    CHECK(v.metric == "grad_norm");
    CHECK(v.spike_run == i + 1);  // the run so far: its verdict is open
  }
  // A guard restored from a checkpoint here decides the fourth step the same.
  StabilityGuard resumed(guard_config("skip"));
  resumed.restore(g.state());
  auto fourth = g.decide(risen(3));
  CHECK(fourth.apply);
  CHECK(fourth.kind.empty());
  CHECK(fourth.rebaselined == 4);
  CHECK(fourth.spike_run == 0);
  CHECK(fourth.metric == "grad_norm");
  CHECK(resumed.decide(risen(3)).rebaselined == 4);
  g.record_applied(risen(3));
  // The new level is applied from then on, and at once (no new warmup) a
  // real spike above it is still caught; the loss kept its own baseline.
  CHECK_FALSE(g.check(1.9, 40.0).apply);
  CHECK_FALSE(g.check(50.0, 3.0).apply);
  for (int i = 4; i < 12; ++i) {
    auto v = g.decide(risen(i));
    CHECK(v.apply);
    CHECK(v.rebaselined == 0);
    g.record_applied(risen(i));
  }
  // An isolated spike between ordinary steps never re-baselines.
  StabilityGuard h(guard_config("skip"));
  feed(h, 20);
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(h.decide(dflow::train::GuardSignal{2.0, 30.0, false, {}}).apply);
    auto ordinary = dflow::train::GuardSignal{2.0, 1.0, false, {}};
    CHECK(h.decide(ordinary).apply);
    h.record_applied(ordinary);
  }
}

TEST_CASE("Guard.Rollback.a_loss_that_stays_up_is_a_cliff_never_a_new_level") {
  auto config = guard_config("rollback");
  config.cliff_steps = 6;  // longer than rebaseline_after(): the loss's run of spikes comes first
  StabilityGuard g(config);
  feed(g, 20);
  for (int i = 0; i < 5; ++i) {
    auto v = g.decide(dflow::train::GuardSignal{50.0, 1.0, false, {}});
    CHECK_FALSE(v.apply);
    CHECK(v.rebaselined == 0);
  }
  auto sixth = g.decide(dflow::train::GuardSignal{50.0, 1.0, false, {}});
  CHECK(sixth.kind == "cliff");
  CHECK(sixth.rollback);
}
