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
  // No held-out prompts given: the default graph runs without its eval node.
  for (const auto& node : c.pipeline.nodes) CHECK(node.type.rfind("eval.", 0) != 0);
}
