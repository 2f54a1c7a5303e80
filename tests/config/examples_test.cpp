// The example configs load and say what their comments promise.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include "config/config.hpp"

using dflow::config::load_config;

TEST_CASE("Config.Examples.qwen3_8b_is_the_specforge_recipe_in_bf16_on_gpus") {
  const auto c = load_config(::dflow::testing::source_dir() + "/examples/qwen3-8b.yaml");
  CHECK(c.model.drafter.num_layers == 5);
  CHECK(c.model.drafter.block_size == 16);
  CHECK(c.model.drafter.target_layer_ids == std::vector<int>{1, 9, 17, 25, 33});
  CHECK(c.model.drafter.mask_token_id == 151669);
  CHECK(c.train.anchors_per_sequence == 512);
  CHECK(c.data.max_length == 3072);
  CHECK(c.train.loss_decay_gamma == 7.0);
  CHECK(c.train.lr == doctest::Approx(6e-4));
  CHECK(c.train.warmup_ratio == doctest::Approx(0.04));
  CHECK(c.train.epochs == 6);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.data.tokens_per_batch == 4 * 3072);
  // Mixed precision: bf16 target and drafter (AdamW keeps fp32 masters and moments).
  CHECK(c.model.target.dtype == "bfloat16");
  CHECK(c.model.drafter.dtype == "bfloat16");
  CHECK(c.devices.drafter == "cuda");
  CHECK(c.devices.target == std::vector<std::string>{"cuda"});
  // No held-out prompts and no periodic evaluation: the run turns the eval
  // node off (Cli.Examples.every_example_trains_from_outside_the_checkout).
  CHECK(c.eval.prompts.empty());
  CHECK(c.eval.every_steps == 0);
}

namespace {
const dflow::config::NodeDecl& node_named(const dflow::config::Config& c, const std::string& name) {
  for (const auto& node : c.pipeline.nodes)
    if (node.name == name) return node;
  FAIL("no node named " << name);
  return c.pipeline.nodes.front();
}
}  // namespace

TEST_CASE("Config.Examples.qwen3_8b_2026_slides_four_layers_with_muon_dpace_and_dspark_heads") {
  const auto c = load_config(::dflow::testing::source_dir() + "/examples/qwen3-8b-2026.yaml");
  CHECK(c.model.drafter.num_layers == 5);
  CHECK(c.model.drafter.target_layer_ids == std::vector<int>{1, 9, 17, 25, 33});
  CHECK(c.model.drafter.sliding_window == 2048);
  const std::string sliding = "sliding_attention";
  CHECK(c.model.drafter.layer_types == std::vector<std::string>{sliding, sliding, sliding, sliding, "full_attention"});
  CHECK(node_named(c, "optimizer").type == "optimizer_step.muon");
  const auto& drafter = node_named(c, "drafter");
  CHECK(drafter.type == "drafter_step");
  CHECK(drafter.params["objective"].as<std::string>() == "dpace");
  CHECK(drafter.params["alpha"].as<double>() == 0.5);
  CHECK(c.model.drafter.kind == "dspark");
  CHECK_FALSE(drafter.params["head"]);
  CHECK(c.eval.every_steps == 0);
}

TEST_CASE("Config.Examples.qwen3_8b_cached_reads_its_features_from_a_cache") {
  const auto c = load_config(::dflow::testing::source_dir() + "/examples/qwen3-8b-cached.yaml");
  const auto& target = node_named(c, "target");
  CHECK(target.type == "features.cached");
  CHECK(target.params["dir"].as<std::string>() == "features/qwen3-8b");
  for (const auto& node : c.pipeline.nodes) CHECK(node.type != "target_forward");
  CHECK(c.model.drafter.target_layer_ids == std::vector<int>{1, 9, 17, 25, 33});
}
