// What guard policy rollback keeps, on its own: which snapshot is good, what
// a rollback undoes, and that a checkpoint carries all of it.
#include <doctest/doctest.h>

#include <set>

#include "train/rollback_keeper.hpp"

using dflow::train::GuardVerdict;
using dflow::train::RollbackKeeper;
using dflow::train::RollbackSnapshot;

namespace {

dflow::config::GuardConfig guard_config(const std::string& policy) {
  dflow::config::GuardConfig c;
  c.policy = policy;
  c.snapshot_every = 5;
  return c;
}

// The state after `completed_steps` steps: its tensors say which step it is.
RollbackSnapshot snapshot_after(int64_t completed_steps) {
  RollbackSnapshot s;
  s.completed_steps = completed_steps;
  s.parameters = {torch::full({2, 3}, static_cast<float>(completed_steps)), torch::arange(4.0f) + completed_steps};
  s.optimizer_state = {{"exp_avg.w", torch::full({2, 3}, 0.5f * completed_steps)},
                       {"exp_avg_sq.w", torch::full({2, 3}, 0.25f * completed_steps)}};
  s.optimizer_steps = completed_steps;
  s.guard_state = {{"losses", {2.0, 2.1}}, {"rollbacks", 0}};
  return s;
}

GuardVerdict high_loss() {
  GuardVerdict v;
  v.above_cliff = true;
  v.cliff_steps = 1;
  return v;
}

std::vector<int64_t> samples_of(int64_t step_index) { return {10 * step_index, 10 * step_index + 1}; }

// Steps [from, to) as the optimizer takes them: settled, taken, and a
// candidate after each applied step at the cadence; `high` steps stand above
// the cliff threshold (not applied, no candidate after them).
void run_steps(RollbackKeeper& keeper, int64_t from, int64_t to, std::set<int64_t> high = {}) {
  for (int64_t index = from; index < to; ++index) {
    const GuardVerdict verdict = high.count(index) ? high_loss() : GuardVerdict::applied();
    if (keeper.candidate_due_at_start(index)) keeper.keep_candidate(snapshot_after(index));
    keeper.settle(index, verdict);
    keeper.step_taken(index, samples_of(index));
    if (keeper.candidate_due_after(index + 1, verdict, high.count(index) ? 1 : 0))
      keeper.keep_candidate(snapshot_after(index + 1));
  }
}

bool same(const RollbackSnapshot& a, const RollbackSnapshot& b) {
  bool equal = a.completed_steps == b.completed_steps && a.optimizer_steps == b.optimizer_steps &&
               a.guard_state == b.guard_state && a.parameters.size() == b.parameters.size() &&
               a.optimizer_state.size() == b.optimizer_state.size();
  for (size_t i = 0; equal && i < a.parameters.size(); ++i) equal = torch::equal(a.parameters[i], b.parameters[i]);
  for (const auto& [name, t] : a.optimizer_state)
    equal = equal && b.optimizer_state.count(name) && torch::equal(t, b.optimizer_state.at(name));
  return equal;
}

}  // namespace

TEST_CASE("Rollback.Keeper.keeps_nothing_unless_the_policy_is_rollback") {
  RollbackKeeper keeper(guard_config("skip"));
  CHECK_FALSE(keeper.keeping());
  run_steps(keeper, 0, 12);
  CHECK(keeper.good() == nullptr);
  CHECK(keeper.candidate() == nullptr);
  CHECK(keeper.state().is_null());
  CHECK(keeper.tensors().empty());
}

TEST_CASE("Rollback.Keeper.a_candidate_is_good_once_the_step_on_its_weights_is_unremarkable") {
  RollbackKeeper keeper(guard_config("rollback"));
  run_steps(keeper, 0, 7);  // candidates after 0 and 5 steps, each vouched for by the step after it
  REQUIRE(keeper.good() != nullptr);
  CHECK(keeper.good()->completed_steps == 5);
  CHECK(keeper.candidate() == nullptr);

  // The candidate after 10 steps meets a high loss: the update before it may
  // have done the damage, so it is dropped and the good one stays.
  run_steps(keeper, 7, 13, {10, 11, 12});
  CHECK(keeper.good()->completed_steps == 5);

  // A rollback goes back to it and names every step since, with its samples.
  const auto undo = keeper.roll_back();
  CHECK(undo.to_step == 5);
  CHECK(undo.undone_steps == std::vector<int64_t>{6, 7, 8, 9, 10, 11, 12, 13});
  std::vector<int64_t> excluded;
  for (int64_t index = 5; index < 13; ++index)
    for (int64_t id : samples_of(index)) excluded.push_back(id);
  CHECK(undo.excluded_sample_ids == excluded);
  // The good snapshot stays for the next rollback, which undoes only the steps after this one.
  CHECK(keeper.good()->completed_steps == 5);
  run_steps(keeper, 13, 14, {13});
  CHECK(keeper.roll_back().undone_steps == std::vector<int64_t>{14});
}

TEST_CASE("Rollback.Keeper.a_restored_keeper_rolls_back_as_the_one_it_was_saved_from") {
  RollbackKeeper saved(guard_config("rollback")), restored(guard_config("rollback"));
  run_steps(saved, 0, 10);  // good after 5 steps, a candidate after 10 not yet settled
  REQUIRE(saved.candidate() != nullptr);
  const auto tensors = saved.tensors();
  restored.restore(saved.state(), std::map<std::string, torch::Tensor>(tensors.begin(), tensors.end()), torch::kCPU);
  CHECK(restored.state() == saved.state());
  REQUIRE(restored.good() != nullptr);
  REQUIRE(restored.candidate() != nullptr);
  CHECK(same(*restored.good(), *saved.good()));
  CHECK(same(*restored.candidate(), *saved.candidate()));
  // It already holds its candidate: none is taken when its run goes on.
  CHECK_FALSE(restored.candidate_due_at_start(10));

  for (auto* keeper : {&saved, &restored}) run_steps(*keeper, 10, 13, {10, 11, 12});
  const auto a = saved.roll_back(), b = restored.roll_back();
  CHECK(b.to_step == a.to_step);
  CHECK(b.undone_steps == a.undone_steps);
  CHECK(b.excluded_sample_ids == a.excluded_sample_ids);
}

TEST_CASE("Rollback.Keeper.a_checkpoint_without_kept_state_keeps_nothing") {
  RollbackKeeper keeper(guard_config("rollback"));
  run_steps(keeper, 0, 7);
  keeper.restore(nullptr, {}, torch::kCPU);  // written under another policy, or by an older dflow
  CHECK(keeper.good() == nullptr);
  CHECK(keeper.candidate() == nullptr);
  CHECK(keeper.state()["steps_since_good"].empty());

  RollbackKeeper fresh(guard_config("rollback"));
  fresh.restore(nullptr, {}, torch::kCPU);
  CHECK(fresh.candidate_due_at_start(20));  // the state it resumes from is the first candidate
}
