// The drafter node's objectives beyond ce and kl: `loss: tv`, `lk_hybrid` and a weighted
// mix with it train on the demo through the drafter node (finite step
// records, the acceptance rate per slot, TV's loss within [0, 1]), and the
// resume signature names the loss, so a resume under another is refused and
// one under the same goes on. The feature-source refusal for a loss that
// needs the target's distribution is in dspark_params_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "drafter/kind.hpp"
#include "drafter_params.hpp"
#include "error_of.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using dflow::testing::error_of;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;

using testing::with_drafter;

namespace {

const std::vector<std::string> kShort{"train.epochs=1", "eval.every_steps=0"};

}  // namespace

TEST_CASE("Losses.Train.tv_and_a_mix_train_and_their_resume_names_the_loss") {
  struct Case {
    std::string params, saved;
    double most;  // the step loss's bound: TV lies in [0, 1]
  };
  const std::vector<Case> cases{
      {"{loss: tv}", "drafter_step {loss: tv}", 1.0},
      {"{loss: {ce: 0.1, tv: 0.9}}", "drafter_step {loss: {ce: 0.1, tv: 0.9}}", HUGE_VAL},
      {"{loss: lk_hybrid}", "drafter_step {loss: lk_hybrid}", HUGE_VAL},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.params);
    const auto dir = fresh_dir("loss-choice-" + std::to_string(i));
    nodes::run_training(stopped_after(with_drafter(small_run_config(dir, kShort), c.params), 2), {});
    nodes::RunOptions resume;
    resume.resume = "latest";
    // Another loss (ce, the default) is refused, naming the saved one.
    const std::string e =
        error_of([&] { nodes::run_training(stopped_after(small_run_config(dir, kShort), 3), resume); });
    // (Every other key is at its default, and so left out of the signature.)
    CHECK_MESSAGE(e.find("pipeline.nodes.drafter: " + c.saved + " -> drafter_step (params.loss: ") != std::string::npos,
                  e);
    CHECK_MESSAGE(e.find(" -> its default)") != std::string::npos, e);
    // The same loss goes on.
    nodes::run_training(stopped_after(with_drafter(small_run_config(dir, kShort), c.params), 3), resume);
    const auto records = step_records(dir);
    REQUIRE(records.size() == 3);
    for (const auto& r : records) {
      const double loss = r["loss"].get<double>();
      CHECK(std::isfinite(loss));
      CHECK(loss >= 0.0);
      CHECK(loss <= c.most);
      REQUIRE(r.contains("accept_rate_per_position"));
      CHECK(r["accept_rate_per_position"].size() == r["accuracy_per_position"].size());
      for (const auto& a : r["accept_rate_per_position"]) {
        CHECK(a.get<double>() >= 0.0);
        CHECK(a.get<double>() <= 1.0);
      }
      // Each loss reads the target's distribution: the rates are sum min(p, q), and the
      // record gives the tau they imply, 1 + sum_k prod_{j <= k} a_j, within [1, block size].
      REQUIRE(r.contains("expected_tau"));
      double tau = 1.0, reached = 1.0;
      for (const auto& a : r["accept_rate_per_position"]) tau += (reached *= a.get<double>());
      CHECK(r["expected_tau"].get<double>() == doctest::Approx(tau).epsilon(1e-12));
      CHECK(r["expected_tau"].get<double>() >= 1.0);
      CHECK(r["expected_tau"].get<double>() <= 16.0);
    }
  }
}

// Under ce the acceptance rate per slot is q of the data's token, not an
// expectation under the target's distribution: no expected tau is claimed.
TEST_CASE("Losses.Records.no_expected_tau_without_the_target_distribution") {
  const auto dir = fresh_dir("loss-no-expected");
  nodes::run_training(
      testing::with_kind(small_run_config(dir, {"run.max_steps=2", "eval.every_steps=0"}), "{kind: dspark, markov_rank: 8}"),
      {});
  const auto records = step_records(dir);
  REQUIRE(records.size() == 2);
  for (const auto& r : records) {
    CHECK(r.contains("accept_rate_per_position"));
    CHECK_FALSE(r.contains("expected_tau"));
  }
  std::filesystem::remove_all(dir);
}

// eval.expected_acceptance: the same ce run (DSpark's confidence head
// trains on the main loss's rate) records the expected acceptance and its
// tau, and trains exactly as without it; a source without the target's last
// hidden state is refused naming the key.
TEST_CASE("Losses.Records.expected_acceptance_under_ce_records_tau_and_trains_the_same") {
  const auto plain_dir = fresh_dir("loss-ce-plain"), expected_dir = fresh_dir("loss-ce-expected");
  const std::string dspark = "{kind: dspark, markov_rank: 8}";
  nodes::run_training(
      testing::with_kind(small_run_config(plain_dir, {"run.max_steps=3", "eval.every_steps=0"}), dspark), {});
  nodes::run_training(testing::with_kind(small_run_config(expected_dir, {"run.max_steps=3", "eval.every_steps=0",
                                                                   "eval.expected_acceptance=true"}),
                                   dspark),
                      {});
  const auto plain = step_records(plain_dir), expected = step_records(expected_dir);
  REQUIRE(plain.size() == 3);
  REQUIRE(expected.size() == 3);
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    CHECK(plain[i]["loss"] == expected[i]["loss"]);
    CHECK(plain[i]["grad_norm"] == expected[i]["grad_norm"]);
    CHECK_FALSE(plain[i].contains("expected_tau"));
    REQUIRE(expected[i].contains("expected_tau"));
    double tau = 1.0, reached = 1.0;
    for (const auto& a : expected[i]["accept_rate_per_position"]) tau += (reached *= a.get<double>());
    CHECK(expected[i]["expected_tau"].get<double>() == doctest::Approx(tau).epsilon(1e-12));
    CHECK(expected[i]["accept_rate_per_position"] != plain[i]["accept_rate_per_position"]);
  }
  std::filesystem::remove_all(plain_dir);
  std::filesystem::remove_all(expected_dir);
}

TEST_CASE("Losses.Params.kl_temperature_is_refused_for_a_loss_without_a_temperature") {
  const auto dir = fresh_dir("loss-temperature");
  const std::string e = error_of(
      [&] { nodes::run_training(with_drafter(small_run_config(dir, kShort), "{loss: tv, kl_temperature: 2}"), {}); });
  CHECK_MESSAGE(e.find("params.kl_temperature") != std::string::npos, e);
  CHECK_MESSAGE(e.find("needs loss: kl (loss is tv)") != std::string::npos, e);
}

// lk_hybrid (and a mix with it) trains every registered kind: each kind's
// own terms beside it, finite and non-negative, the acceptance rate in [0, 1].
TEST_CASE("Losses.Train.lk_hybrid_trains_every_kind") {
  for (const auto& kind : dflow::drafter::drafter_kind_names()) {
    for (const std::string loss : {"lk_hybrid", "{ce: 0.1, lk_hybrid: 0.9}"}) {
      CAPTURE(kind);
      CAPTURE(loss);
      const auto dir = fresh_dir("lk-" + kind);
      nodes::run_training(
          testing::with_kind(with_drafter(small_run_config(dir, {"run.max_steps=2", "eval.every_steps=0"}), "{loss: " + loss + "}"),
                    "{kind: " + kind + "}"),
          {});
      const auto records = step_records(dir);
      REQUIRE(records.size() == 2);
      for (const auto& r : records) {
        CHECK(std::isfinite(r["loss"].get<double>()));
        // The objective's own loss (main_loss beside a kind's terms; the loss itself without any).
        CHECK(r.value("main_loss", r["loss"].get<double>()) >= 0.0);
        for (const auto& a : r["accept_rate_per_position"]) {
          CHECK(a.get<double>() >= 0.0);
          CHECK(a.get<double>() <= 1.0);
        }
        CHECK(r.contains("expected_tau"));
      }
      std::filesystem::remove_all(dir);
    }
  }
}

