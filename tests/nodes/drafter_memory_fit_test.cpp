// The memory check drafter_step logs at start (nodes/drafter_memory_fit.hpp):
// whether the largest micro-batch fits, the largest anchors_per_sequence
// that does, and recomputation's share, from the memory model.
#include <doctest/doctest.h>

#include "target/tiny_target.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "target/target_memory.hpp"

using namespace dflow;

namespace {

model::DrafterSpec qwen3_8b_drafter() {
  const model::HFConfig target = model::tiny_target_config(model::preset_target_options("qwen3-8b"));
  model::DrafterOptions options;
  options.num_layers = 5;
  options.block_size = 16;
  options.num_target_features = 5;
  return model::make_drafter_spec(target, options);
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
  const model::DrafterSpec spec = qwen3_8b_drafter();
  const config::DataConfig data = recipe_data();
  model::ObjectiveOptions objective;
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
  const model::HFConfig target = model::tiny_target_config(model::preset_target_options("qwen3-8b"));
  const config::DataConfig data = recipe_data();
  const nodes::TargetForwardFit forward = nodes::largest_target_forward(target, data, 5, 2, /*cuda=*/true);
  CHECK(forward.rows * forward.length == data.tokens_per_batch);
  for (const int64_t length : nodes::checked_lengths(data)) {
    model::TargetForwardShape shape;
    shape.rows = data.tokens_per_batch / length;
    shape.length = length;
    shape.element_bytes = 2;
    shape.features = 5;
    shape.cuda = true;
    CHECK(model::estimate_target_forward(target, shape).total_bytes() <= forward.bytes);
  }
  // More than the five features it returns and their concatenation: a layer's working set.
  CHECK(forward.bytes > 2.0 * 5 * 16384 * 4096 * 2);
  nodes::MemoryFit fit = nodes::check_memory_fit(qwen3_8b_drafter(), data, 512, torch::kBFloat16, {}, 1e12);
  fit.target_forward = forward;
  CHECK(fit.describe("drafter", "cuda:0").find(" for the target's forward of " + std::to_string(forward.rows) +
                                               " rows x " + std::to_string(forward.length) + " tokens beside it)") !=
        std::string::npos);
}
