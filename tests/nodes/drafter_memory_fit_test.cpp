// The memory check drafter_step logs at start (nodes/drafter_memory_fit.hpp):
// whether the largest micro-batch fits, the largest anchors_per_sequence
// that does, and recomputation's share, from the memory model.
#include <doctest/doctest.h>

#include "config/config.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/kind.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/registry.hpp"
#include "target/target_memory.hpp"
#include "target/tiny_target.hpp"

using namespace dflow;

namespace {

dflow::drafter::DrafterSpec qwen3_8b_drafter() {
  const dflow::target::HFConfig target =
      dflow::target::tiny_target_config(dflow::target::preset_target_options("qwen3-8b"));
  dflow::drafter::DrafterOptions options;
  options.num_layers = 5;
  options.block_size = 16;
  options.num_target_features = 5;
  return dflow::drafter::make_drafter_spec(target, options);
}

config::DataConfig recipe_data() {
  config::DataConfig data;
  data.max_length = 8192;
  data.buckets = {1024, 2048, 4096, 8192};
  data.tokens_per_batch = 16384;
  return data;
}

}  // namespace

TEST_CASE("Nodes.DrafterMemoryFit.says_whether_the_run_fits_and_what_would") {
  const dflow::drafter::DrafterSpec spec = qwen3_8b_drafter();
  const config::DataConfig data = recipe_data();
  dflow::drafter::ObjectiveOptions objective;
  const double gib = 1024.0 * 1024.0 * 1024.0;

  // Plenty of memory: fits, and every anchor count up to max_length would.
  const nodes::MemoryFit roomy = nodes::check_memory_fit(spec, data, 512, torch::kBFloat16, objective, 1e6 * gib);
  CHECK(roomy.fits);
  CHECK(roomy.largest_fitting_anchors == data.max_length - 1);
  CHECK(roomy.describe("drafter", "cuda:0").find(": fits;") != std::string::npos);
  // Recomputing keeps less per anchor.
  CHECK(roomy.per_anchor_recomputed_bytes < 0.5 * roomy.per_anchor_bytes);

  // Half of what the configured run needs: it does not fit; the largest
  // anchors_per_sequence named fits and one more does not; recomputing lets more fit.
  const double half = roomy.needed_bytes / 2;
  const nodes::MemoryFit tight = nodes::check_memory_fit(spec, data, 512, torch::kBFloat16, objective, half);
  CHECK_FALSE(tight.fits);
  REQUIRE(tight.largest_fitting_anchors > 0);
  REQUIRE(tight.largest_fitting_anchors < 512);
  CHECK(nodes::check_memory_fit(spec, data, tight.largest_fitting_anchors, torch::kBFloat16, objective, half).fits);
  CHECK_FALSE(nodes::check_memory_fit(spec, data, tight.largest_fitting_anchors + 1, torch::kBFloat16, objective, half).fits);
  CHECK(tight.largest_fitting_anchors_other > tight.largest_fitting_anchors);
  const std::string said = tight.describe("drafter", "cuda:0");
  CHECK(said.find("does not fit") != std::string::npos);
  CHECK(said.find("the largest anchors_per_sequence that fits: " + std::to_string(tight.largest_fitting_anchors)) !=
        std::string::npos);
  CHECK(said.find("params.recompute: true") != std::string::npos);

  // With recompute on, the same memory holds the configured run.
  objective.recompute_layers = true;
  const nodes::MemoryFit recomputed = nodes::check_memory_fit(spec, data, 512, torch::kBFloat16, objective, half);
  CHECK(recomputed.fits);
  CHECK(recomputed.largest_fitting_anchors == tight.largest_fitting_anchors_other);
}

TEST_CASE("Nodes.DrafterMemoryFit.the_targets_forward_beside_the_drafter_is_its_largest_micro_batchs") {
  const dflow::target::HFConfig target =
      dflow::target::tiny_target_config(dflow::target::preset_target_options("qwen3-8b"));
  const config::DataConfig data = recipe_data();
  const nodes::TargetForwardFit forward = nodes::largest_target_forward(target, data, 5, 2, /*cuda=*/true);
  CHECK(forward.rows * forward.length == data.tokens_per_batch);
  for (const int64_t length : nodes::checked_lengths(data)) {
    dflow::target::TargetForwardShape shape;
    shape.rows = data.tokens_per_batch / length;
    shape.length = length;
    shape.element_bytes = 2;
    shape.features = 5;
    shape.cuda = true;
    CHECK(dflow::target::estimate_target_forward(target, shape).total_bytes() <= forward.bytes);
  }
  // More than the five features it returns and their concatenation: a layer's working set.
  CHECK(forward.bytes > 2.0 * 5 * 16384 * 4096 * 2);
  nodes::BesideTheStep beside;
  beside.target_forward = forward;
  const nodes::MemoryFit fit = nodes::check_memory_fit(qwen3_8b_drafter(), data, 512, torch::kBFloat16, {}, 1e12, beside);
  CHECK(fit.available_bytes == doctest::Approx(1e12 - forward.bytes));
  CHECK(fit.describe("drafter", "cuda:0").find(" for the target's forward of " + std::to_string(forward.rows) +
                                               " rows x " + std::to_string(forward.length) + " tokens beside it)") !=
        std::string::npos);
}

namespace {

// The example recipe's data on the default pipeline (the demo's graph), on a GPU.
config::Config recipe_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> o{"data.max_length=8192", "data.buckets=[1024, 2048, 4096, 8192]",
                             "data.tokens_per_batch=16384", "model.drafter.dtype=bfloat16"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config("", o);
}

dflow::drafter::DrafterSpec with_kind(const std::string& kind, const nlohmann::json& fields) {
  const dflow::target::HFConfig target =
      dflow::target::tiny_target_config(dflow::target::preset_target_options("qwen3-8b"));
  dflow::drafter::DrafterOptions options;
  options.num_layers = 5;
  options.block_size = 16;
  options.num_target_features = 5;
  options.kind = kind;
  options.kind_fields = fields;
  return dflow::drafter::make_drafter_spec(target, options);
}

}  // namespace

// The sources emit each micro-batch's features on the drafter's device; the
// default pipeline lets 4 + 2 of them wait on target -> reorder and
// reorder -> drafter.batch while the step runs on its own.
TEST_CASE("Nodes.DrafterMemoryFit.the_feature_batches_the_edges_into_the_drafter_hold_are_counted") {
  const dflow::drafter::DrafterSpec spec = qwen3_8b_drafter();
  const config::Config config = recipe_config();
  const nodes::BesideTheStep plain =
      nodes::beside_the_step(config, nodes::default_registry(), spec, torch::kBFloat16, /*teacher=*/false, 0);
  CHECK(plain.queued_batches == 6);
  // 16,384 tokens x 5 layers x 4096 x 2 bytes each: 3.75 GiB for six.
  CHECK(plain.queued_bytes == doctest::Approx(6.0 * 16384 * 5 * 4096 * 2));
  const nodes::BesideTheStep teacher =
      nodes::beside_the_step(config, nodes::default_registry(), spec, torch::kBFloat16, /*teacher=*/true, 0);
  CHECK(teacher.queued_bytes == doctest::Approx(6.0 * 16384 * 6 * 4096 * 2));
  // Wider edges hold more.
  const config::Config wide = recipe_config({"pipeline.edges.target->reorder.capacity=8"});
  CHECK(nodes::beside_the_step(wide, nodes::default_registry(), spec, torch::kBFloat16, false, 0).queued_batches == 10);

  // A fit that holds the step alone no longer does with the batches beside it, and says why.
  const dflow::drafter::ObjectiveOptions objective;
  const nodes::MemoryFit alone = nodes::check_memory_fit(spec, config.data, 512, torch::kBFloat16, objective, 1e15);
  const double just_enough = alone.needed_bytes + plain.eval_drafter_bytes + 1.0;
  CHECK(nodes::check_memory_fit(spec, config.data, 512, torch::kBFloat16, objective, just_enough + plain.queued_bytes,
                                plain).fits);
  const nodes::MemoryFit short_of = nodes::check_memory_fit(spec, config.data, 512, torch::kBFloat16, objective,
                                                            just_enough + plain.queued_bytes / 2, plain);
  CHECK_FALSE(short_of.fits);
  CHECK(short_of.describe("drafter", "cuda:0").find(" for the 6 feature batches its input edges can hold") !=
        std::string::npos);
}

// eval.tau keeps its own copy of the drafter on the drafter's device, on
// rank 0 only, in the drafter's dtype; rollback keeps two snapshots.
TEST_CASE("Nodes.DrafterMemoryFit.evals_drafter_on_rank_0_and_rollbacks_snapshots_are_counted") {
  const dflow::drafter::DrafterSpec spec = qwen3_8b_drafter();
  const double parameters = dflow::drafter::drafter_parameter_count(spec);
  const config::Config config = recipe_config();  // eval every 50 steps on the demo's prompts
  const auto& kinds = nodes::default_registry();
  const nodes::BesideTheStep rank0 = nodes::beside_the_step(config, kinds, spec, torch::kBFloat16, false, 0);
  CHECK(rank0.eval_drafter_bytes >= 2 * parameters);
  CHECK(rank0.eval_drafter_bytes < 2 * parameters * 1.5);  // and a prompt of max_length tokens' context
  CHECK(nodes::beside_the_step(config, kinds, spec, torch::kFloat32, false, 0).eval_drafter_bytes ==
        doctest::Approx(2 * rank0.eval_drafter_bytes));
  CHECK(nodes::beside_the_step(config, kinds, spec, torch::kBFloat16, false, 1).eval_drafter_bytes == 0);
  // Off (no periodic evaluation, no prompts): nothing.
  const config::Config off = recipe_config({"eval.every_steps=0", "eval.prompts=no-such-prompts.jsonl"});
  CHECK(nodes::beside_the_step(off, kinds, spec, torch::kBFloat16, false, 0).eval_drafter_bytes == 0);

  CHECK(rank0.rollback_bytes == 0);
  const config::Config rollback = recipe_config({"guard.policy=rollback"});
  // Weights in bf16, two float32 moments and float32 masters, twice.
  CHECK(nodes::beside_the_step(rollback, kinds, spec, torch::kBFloat16, false, 0).rollback_bytes ==
        doctest::Approx(2 * parameters * (2 + 8 + 4)));
}

// A kind that reads the teacher whatever the loss (DSpine) is counted with
// it under ce; a kind's own chunks of logits and its extra loss calls count.
TEST_CASE("Nodes.DrafterMemoryFit.the_kinds_teacher_and_loss_terms_are_counted_whatever_the_loss") {
  const config::Config config = recipe_config();
  dflow::drafter::ObjectiveOptions ce;  // loss: ce
  const dflow::drafter::DrafterSpec dspine = with_kind("dspine", nlohmann::json::object());
  CHECK(nodes::micro_batch_shape(dspine, config.data, 8192, 512, torch::kBFloat16, ce, false).teacher);
  const dflow::drafter::DrafterSpec dflash = with_kind("dflash", nlohmann::json::object());
  CHECK_FALSE(nodes::micro_batch_shape(dflash, config.data, 8192, 512, torch::kBFloat16, ce, false).teacher);

  // XPress: each consistency round keeps its refiner pass and its loss call's gradients.
  const dflow::drafter::DrafterSpec xpress =
      with_kind("xpress", dflow::drafter::drafter_kind("xpress").spec_fields({}));
  auto per_anchor = [&](int64_t passes) {
    dflow::drafter::ObjectiveOptions o;
    o.kind_options = {{"consistency_passes", passes}};
    return dflow::drafter::estimate_drafter_memory(
               xpress, nodes::micro_batch_shape(xpress, config.data, 8192, 512, torch::kBFloat16, o, false))
        .per_anchor_bytes;
  };
  const double none = per_anchor(0), three = per_anchor(3), six = per_anchor(6);
  CHECK(three > none);
  CHECK(six - three == doctest::Approx(three - none));
  // At least each round's [P, H] gradient and [P, r] bias gradient, over a block's 16 slots.
  const double h = static_cast<double>(xpress.hidden_size);
  CHECK(three - none >= 3 * 16 * (2 * h + 2 * 256));
}
