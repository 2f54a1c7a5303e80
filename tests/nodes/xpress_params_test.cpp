// model.drafter.kind: xpress: each bad value of its params is
// refused naming the key and the value; a short online run chosen by
// `--set` trains (the loss falls) with records carrying its terms (loss =
// main + consistency_weight x consistency + base_anchor_weight x
// base_anchor) and the backbone's own acceptance per slot, and its eval
// drafts with the Jacobi passes; `loss: kl` trains it too (on packed
// rows); a resume
// refuses a change of its params and goes on with the same ones.
#include <doctest/doctest.h>

#include <cmath>

#include "error_of.hpp"
#include "nodes/trainer.hpp"
#include "drafter_params.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::check_refusals;
using testing::fresh_dir;
using testing::RefusalCase;
using testing::with_drafter;
using testing::with_kind;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
namespace fs = std::filesystem;

using dflow::testing::error_of;

namespace {

double mean_of(const std::vector<nlohmann::json>& records, size_t begin, size_t end, const char* key) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += records[i][key].get<double>();
  return sum / static_cast<double>(end - begin);
}

}  // namespace

TEST_CASE("XPress.Params.bad_values_are_refused_naming_the_key_and_the_value") {
  const auto dir = fresh_dir("xpress-bad");
  const std::vector<RefusalCase> cases{
      {"{}", {"model.drafter.xpress_rank", "must be >= 1", "got 0"}, "{kind: xpress, xpress_rank: 0}"},
      {"{}", {"model.drafter.xpress_mlp_ratio", "got -1"}, "{kind: xpress, xpress_mlp_ratio: -1}"},
      {"{}", {"model.drafter.num_jacobi_passes", "must be >= 0", "got -2"}, "{kind: xpress, num_jacobi_passes: -2}"},
      {"{}", {"model.drafter.consistency_weight", "got -0.5"}, "{kind: xpress, consistency_weight: -0.5}"},
      {"{}", {"model.drafter.consistency_passes", "got -1"}, "{kind: xpress, consistency_passes: -1}"},
      {"{}", {"model.drafter.base_anchor_weight", "must be a finite number >= 0", "got -2"}, "{kind: xpress, base_anchor_weight: -2}"},
      {"{}", {"model.drafter.xpress_rank", "is a param of kind xpress", "model.drafter.kind is dflash", "set model.drafter.kind: xpress"},
       "{xpress_rank: 64}"},
      {"{xpress_rank: 64}",
       {"params.xpress_rank", "set model.drafter.kind: xpress and model.drafter.xpress_rank: 64"}},
  };
  check_refusals(dir, cases);
  fs::remove_all(dir);
}

TEST_CASE("XPress.Train.a_short_run_chosen_by_set_learns_with_its_terms_in_the_records") {
  const auto dir = fresh_dir("xpress-train");
  nodes::run_training(small_run_config(dir, {"run.max_steps=12", "model.drafter.kind=xpress",
                                             "model.drafter.xpress_rank=32"}),
                      {});
  const auto steps = step_records(dir);
  REQUIRE(steps.size() == 12);
  for (const auto& s : steps) {
    REQUIRE(s.contains("consistency_loss"));
    REQUIRE(s.contains("base_anchor_loss"));
    REQUIRE(s.contains("base_accept_rate_per_position"));
    const double main = s["main_loss"].get<double>(), consistency = s["consistency_loss"].get<double>(),
                 anchor = s["base_anchor_loss"].get<double>();
    CHECK(std::isfinite(main));
    CHECK(consistency > 0.0);
    CHECK(anchor > 0.0);
    CHECK(std::isfinite(s["grad_norm"].get<double>()));
    CHECK(s["loss"].get<double>() == doctest::Approx(main + 0.3 * consistency + 0.6 * anchor).epsilon(1e-6));
  }
  const double first = mean_of(steps, 0, 3, "loss"), last = mean_of(steps, 9, 12, "loss");
  INFO("first 3 steps " << first << ", last 3 steps " << last);
  CHECK(last < 0.9 * first);
  // The eval drafts with the Jacobi passes: the untrained baseline and the end.
  const auto evals = testing::records_of_kind(dir, "eval");
  REQUIRE(evals.size() == 2);
  for (const auto& e : evals) CHECK(e["mean_tau"].get<double>() >= 1.0);
  fs::remove_all(dir);
}

TEST_CASE("XPress.Train.loss_kl_trains_it_against_the_targets_distribution_on_packed_rows") {
  // Packed rows: slot 0's previous token stays within the anchor's sample.
  const auto dir = fresh_dir("xpress-kl");
  const auto config = with_kind(
      with_drafter(
          testing::with_pad(small_run_config(dir, {"run.max_steps=2", "eval.every_steps=0"}), "pad_bucket.pack"),
          "{loss: kl}"),
      "{kind: xpress, xpress_rank: 16, consistency_passes: 2}");
  nodes::run_training(config, {});
  const auto steps = step_records(dir);
  REQUIRE(steps.size() == 2);
  for (const auto& s : steps) {
    CHECK(s["main_loss"].get<double>() > 0.0);
    CHECK(s["consistency_loss"].get<double>() > 0.0);
    CHECK(std::isfinite(s["loss"].get<double>()));
  }
  fs::remove_all(dir);
}

TEST_CASE("XPress.Params.a_resume_keeps_the_refiner_and_its_terms") {
  const auto dir = fresh_dir("xpress-resume");
  const std::vector<std::string> short_run{"eval.every_steps=0"};
  const std::string xpress = "{kind: xpress, xpress_rank: 16, consistency_passes: 1}";
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, short_run), xpress), 2), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  for (const std::string& changed : {std::string("{kind: xpress, xpress_rank: 32, consistency_passes: 1}"),
                                     std::string("{kind: xpress, xpress_rank: 16, consistency_passes: 2}"),
                                     std::string("{kind: xpress, xpress_rank: 16, consistency_passes: 1, "
                                                 "base_anchor_full_weight: true}")}) {
    CAPTURE(changed);
    const std::string e = error_of(
        [&] { nodes::run_training(stopped_after(with_kind(small_run_config(dir, short_run), changed), 4), resume); });
    // The params at their defaults are left out of what a resume must keep.
    CHECK_MESSAGE(e.find("model.drafter (kind xpress's params): {xpress_rank: 16, consistency_passes: 1} -> ") !=
                      std::string::npos,
                  e);
  }
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, short_run), xpress), 4), resume);
  const auto records = step_records(dir);
  REQUIRE(records.size() == 4);
  for (const auto& r : records) CHECK(r.contains("consistency_loss"));
  fs::remove_all(dir);
}
