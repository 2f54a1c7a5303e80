// model.drafter.kind: dspine: each bad value of its params is refused
// naming the key and the value; a few online steps on the demo give finite
// records with its refinement and alignment terms (it reads the target's
// distribution whatever the loss); a resume that changes one of its params
// is refused, one that keeps them goes on from the checkpoint's codes.
#include <doctest/doctest.h>

#include <cmath>

#include "error_of.hpp"
#include "nodes/trainer.hpp"
#include "target/target_head.hpp"
#include "train/checkpoint.hpp"
#include "drafter_params.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::check_refusals;
using testing::fresh_dir;
using testing::RefusalCase;
using testing::with_kind;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
namespace fs = std::filesystem;

using dflow::testing::error_of;

namespace {

const std::vector<std::string> kShort{"train.epochs=1", "eval.every_steps=0"};
const std::string kDSpine = "{kind: dspine, transfer_rank: 16, message_size: 16, top_k: 8, alignment_warmup_steps: 1}";

// The transfer_rank in a run's latest checkpoint (its drafter's config.json).
int64_t saved_transfer_rank(const fs::path& out_dir) {
  const auto checkpoint = train::read_checkpoint(train::resolve_checkpoint(out_dir / "checkpoints", "latest"));
  return checkpoint.drafter_config.at("dspine_config").at("transfer_rank").get<int64_t>();
}

// The principal directions of the test target's LM head, recomputed in
// float64: its normalised, centred rows' covariance's eigenvalues above a
// millionth of the largest (those DSpine's codes can whiten).
int64_t head_directions() {
  const auto head = dflow::target::TargetHead::load(testing::assets_dir() / "target");
  const torch::Tensor w = head.lm_head_weight().to(torch::kFloat64);
  const torch::Tensor rows = w / w.norm(2, -1, true).clamp_min(1e-12);  // as F.normalize: zero rows stay zero
  const torch::Tensor centred = rows - rows.mean(0);
  // The covariance's eigenvalues as the squared singular values of the rows
  // (LAPACK's eigh does not converge on this rank-deficient float64 matrix).
  const torch::Tensor values = torch::linalg_svdvals(centred).square();
  return values.gt(1e-6 * values.max().item<double>()).sum().item<int64_t>();
}


}  // namespace

TEST_CASE("DSpine.Params.bad_values_are_refused_naming_the_key_and_the_value") {
  const auto dir = fresh_dir("dspine-bad");
  const std::vector<RefusalCase> cases{
      {"{}", {"model.drafter.transfer_rank", "must be >= 0", "got -1"}, "{kind: dspine, transfer_rank: -1}"},
      {"{}", {"model.drafter.ce_weight", "[0, 1]", "got 1.5"}, "{kind: dspine, ce_weight: 1.5}"},
      {"{}", {"model.drafter.alignment_weight", "got -1"}, "{kind: dspine, alignment_weight: -1}"},
      {"{}", {"model.drafter.replacement_layers", "got -2"}, "{kind: dspine, replacement_layers: -2}"},
      {"{}", {"model.drafter.candidate_mass_threshold", "[0, 1)", "got 1"}, "{kind: dspine, candidate_mass_threshold: 1}"},
      {"{}", {"model.drafter.replacement_end_ratio", "replacement_hold_ratio 0.5 must be below replacement_end_ratio 0.4"}, "{kind: dspine, replacement_hold_ratio: 0.5, replacement_end_ratio: 0.4}"},
      {"{}", {"transfer_rank 100000 exceeds min(hidden size, vocabulary - 1)"}, "{kind: dspine, transfer_rank: 100000}"},
      {"{}", {"model.drafter.message_size", "is a param of kind dspine", "model.drafter.kind is dflash", "set model.drafter.kind: dspine"},
       "{message_size: 4}"},
      {"{message_size: 4}", {"params.message_size", "set model.drafter.kind: dspine and model.drafter.message_size: 4"}},
  };
  check_refusals(dir, cases);
  fs::remove_all(dir);
}

TEST_CASE("DSpine.Train.a_few_online_steps_give_finite_records_with_its_terms_and_a_resume_keeps_its_params") {
  const auto dir = fresh_dir("dspine-train");
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, kShort), kDSpine), 2), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  const std::string changed = "{kind: dspine, transfer_rank: 16, message_size: 16, top_k: 4, alignment_warmup_steps: 1}";
  const std::string e = error_of(
      [&] { nodes::run_training(stopped_after(with_kind(small_run_config(dir, kShort), changed), 4), resume); });
  CHECK_MESSAGE(e.find("model.drafter (kind dspine's params): ") != std::string::npos, e);
  CHECK_MESSAGE(e.find("top_k: 8") != std::string::npos, e);
  CHECK_MESSAGE(e.find("top_k: 4") != std::string::npos, e);
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, kShort), kDSpine), 4), resume);
  const auto steps = step_records(dir);
  REQUIRE(steps.size() == 4);
  for (const auto& s : steps) {
    REQUIRE(s.contains("refinement_loss"));
    REQUIRE(s.contains("alignment_loss"));
    const double main = s["main_loss"].get<double>(), refinement = s["refinement_loss"].get<double>(),
                 alignment = s["alignment_loss"].get<double>();
    CHECK(std::isfinite(main));
    CHECK(refinement > 0.0);
    CHECK(alignment > 0.0);
    CHECK(std::isfinite(s["grad_norm"].get<double>()));
    // loss = main + refinement + beta * mean CE * alignment, beta 0 at step 0 (the warm-up's start).
    if (s["global_step"].get<int64_t>() == 1)
      CHECK(s["loss"].get<double>() == doctest::Approx(main + refinement).epsilon(1e-6));
    else
      CHECK(s["loss"].get<double>() > main + refinement);
  }
  fs::remove_all(dir);
}

TEST_CASE("DSpine.Params.left_out_transfer_rank_is_what_the_target's_head_gives_and_a_resume_keeps_it") {
  // The demo's target (hidden 64) has fewer principal directions than its
  // hidden size: SpecForge's 1024 and min(hidden, vocabulary - 1) would both
  // be refused, the default takes what the head has.
  const int64_t directions = head_directions();
  CAPTURE(directions);
  REQUIRE(directions >= 1);
  REQUIRE(directions < 64);
  const auto dir = fresh_dir("dspine-default-rank");
  const std::string params = "{kind: dspine, message_size: 16, top_k: 8, alignment_warmup_steps: 1}";
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, kShort), params), 2), {});
  CHECK(saved_transfer_rank(dir) == directions);
  nodes::RunOptions resume;
  resume.resume = "latest";
  nodes::run_training(stopped_after(with_kind(small_run_config(dir, kShort), params), 4), resume);
  CHECK(saved_transfer_rank(dir) == directions);
  const auto steps = step_records(dir);
  REQUIRE(steps.size() == 4);
  for (const auto& s : steps) CHECK(std::isfinite(s["loss"].get<double>()));
  // One more than the head has keeps its refusal, naming how many it has.
  const std::string e = error_of([&] {
    nodes::run_training(with_kind(small_run_config(fresh_dir("dspine-rank-too-large"), {"run.max_steps=1", "eval.every_steps=0"}),
                                     "{kind: dspine, transfer_rank: " + std::to_string(directions + 1) + "}"),
                        {});
  });
  CHECK_MESSAGE(e.find("the target's LM head has " + std::to_string(directions) +
                       " principal directions of positive variance, fewer than transfer_rank = " +
                       std::to_string(directions + 1)) != std::string::npos,
                e);
  fs::remove_all(dir);
}
