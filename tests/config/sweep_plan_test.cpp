// dflow sweep's grid: --vary parsing, every combination once, names that say
// what each run varies, and the refusals.
#include <doctest/doctest.h>

#include <functional>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/sweep_plan.hpp"

using namespace dflow::config;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dflow::ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return {};
}
}  // namespace

TEST_CASE("Config.Sweep.vary_splits_on_top_level_commas") {
  CHECK(parse_vary("train.lr=0.02,0.05").values == std::vector<std::string>{"0.02", "0.05"});
  const auto lists = parse_vary("model.drafter.layer_types=[sliding_attention, full_attention],[full_attention, full_attention]");
  CHECK(lists.values == std::vector<std::string>{"[sliding_attention, full_attention]", "[full_attention, full_attention]"});
  CHECK(parse_vary("pipeline.nodes.drafter.params={objective: dpace, alpha: 0.5},{objective: decay}").values.size() == 2);
  CHECK(parse_vary("run.name='a,b',c").values == std::vector<std::string>{"'a,b'", "c"});
  CHECK(error_of([] { parse_vary("train.lr"); }) == "--vary train.lr: expected KEY=v1,v2,... (any key --set takes)");
  CHECK(error_of([] { parse_vary("train.lr=0.1,,0.2"); }).find("an empty value in the list") != std::string::npos);
  CHECK(error_of([] { parse_vary("train.lr=0.1,0.1"); }).find("'0.1' is given twice") != std::string::npos);
}

TEST_CASE("Config.Sweep.every_combination_once_named_after_what_it_varies") {
  const std::vector<SweepAxis> axes{parse_vary("train.lr=0.02,0.05"),
                                    parse_vary("pipeline.nodes.optimizer.type=optimizer_step.adamw,optimizer_step.muon")};
  const auto variants = sweep_variants(axes, 2, 1234);
  REQUIRE(variants.size() == 8);
  CHECK(variants[0].name == "lr=0.02+optimizer=optimizer_step.adamw+seed=1234");
  CHECK(variants[1].name == "lr=0.02+optimizer=optimizer_step.adamw+seed=1235");
  CHECK(variants[2].name == "lr=0.02+optimizer=optimizer_step.muon+seed=1234");
  CHECK(variants[7].name == "lr=0.05+optimizer=optimizer_step.muon+seed=1235");
  CHECK(variants[7].overrides ==
        std::vector<std::string>{"train.lr=0.05", "pipeline.nodes.optimizer.type=optimizer_step.muon", "run.seed=1235"});
  // Each override is one --set: together they load as a config.
  const auto c = load_config("", variants[7].overrides);
  CHECK(c.train.lr == doctest::Approx(0.05));
  CHECK(c.run.seed == 1235);
  // One seed: no seed in the names; nothing varied: one variant "base".
  CHECK(sweep_variants({axes[0]}, 1, 7)[1].name == "lr=0.05");
  const auto base = sweep_variants({}, 1, 7);
  REQUIRE(base.size() == 1);
  CHECK(base[0].name == "base");
  CHECK(sweep_variants({}, 3, 7)[2].name == "seed=9");
}

TEST_CASE("Config.Sweep.labels_and_names") {
  const std::vector<std::string> keys{"pipeline.nodes.drafter.params.objective", "pipeline.edges.load->pad.capacity",
                                      "model.drafter.dtype", "model.target.dtype"};
  CHECK(axis_label(keys[0], keys) == "drafter.objective");
  CHECK(axis_label(keys[1], keys) == "load-pad.capacity");
  CHECK(axis_label(keys[2], keys) == "model.drafter.dtype");  // two axes would both be "dtype"
  const auto lists = sweep_variants({parse_vary("model.drafter.layer_types=[sliding_attention],[full_attention]")}, 1, 1);
  CHECK(lists[0].name == "layer_types=sliding_attention");
  const auto paths = sweep_variants({parse_vary("pipeline.nodes.target.params.dir=/data/a b,/data/a_b")}, 1, 1);
  CHECK(paths[0].name == "target.dir=_data_ab");
  CHECK(paths[1].name == "target.dir=_data_a_b");
}

TEST_CASE("Config.Sweep.refusals") {
  CHECK(error_of([] { sweep_variants({parse_vary("train.lr=1,2"), parse_vary("train.lr=3")}, 1, 1); })
            .find("the key is varied twice") != std::string::npos);
  CHECK(error_of([] { sweep_variants({parse_vary("run.seed=1,2")}, 1, 1); }).find("vary the seed with --seeds N") !=
        std::string::npos);
  CHECK(error_of([] { sweep_variants({parse_vary("run.out_dir=a,b")}, 1, 1); }).find("are the sweep's") != std::string::npos);
  CHECK(error_of([] { sweep_variants({}, 0, 1); }) == "--seeds: must be >= 1, got 0");
}

TEST_CASE("Config.Sweep.named_variants_cannot_set_the_keys_the_sweep_owns") {
  for (const char* key : {"run.seed=7", "run.out_dir=elsewhere", "run.name=other"}) {
    CAPTURE(key);
    SweepAxis recipes;
    add_named_variant(recipes, "base");
    add_named_variant(recipes, std::string("mine: train.lr=0.1 ") + key);
    const std::string error = error_of([&] { sweep_variants({recipes}, 2, 1); });
    CHECK(error.find("--variant mine: " + std::string(key).substr(0, std::string(key).find('=')) + " is the sweep's") !=
          std::string::npos);
  }
}

TEST_CASE("Config.Sweep.a_variant_name_is_a_plain_directory_name") {
  for (const char* name : {".", "..", "...", "a/b", "../up"}) {
    CAPTURE(name);
    SweepAxis recipes;
    CHECK(error_of([&] { add_named_variant(recipes, std::string(name) + ": train.lr=1"); }).find("NAME in letters") !=
          std::string::npos);
  }
  SweepAxis fine;
  add_named_variant(fine, "v1.2: train.lr=1");
  add_named_variant(fine, ".hidden-ok_2");
  CHECK(fine.values == std::vector<std::string>{"v1.2", ".hidden-ok_2"});
}

TEST_CASE("Config.Sweep.named_variants_set_several_keys_each") {
  SweepAxis recipes;
  add_named_variant(recipes, "baseline");
  add_named_variant(recipes, "dpace: pipeline.nodes.drafter.params={objective: dpace, alpha: 0.5}");
  add_named_variant(recipes, "sliding: model.drafter.layer_types=[sliding_attention] model.drafter.sliding_window=32");
  const auto variants = sweep_variants({recipes, parse_vary("train.lr=0.01,0.02")}, 1, 5);
  REQUIRE(variants.size() == 6);
  CHECK(variants[0].name == "baseline+lr=0.01");
  CHECK(variants[0].overrides == std::vector<std::string>{"train.lr=0.01", "run.seed=5"});
  CHECK(variants[4].name == "sliding+lr=0.01");
  CHECK(variants[4].overrides == std::vector<std::string>{"model.drafter.layer_types=[sliding_attention]",
                                                          "model.drafter.sliding_window=32", "train.lr=0.01", "run.seed=5"});
  const auto c = load_config("", variants[2].overrides);  // the dpace one loads
  CHECK(c.pipeline.nodes[5].params["objective"].as<std::string>() == "dpace");
  CHECK(error_of([&] { add_named_variant(recipes, "dpace"); }).find("the name 'dpace' is given twice") != std::string::npos);
  CHECK(error_of([&] { add_named_variant(recipes, "a/b: train.lr=1"); }).find("NAME in letters") != std::string::npos);
  CHECK(error_of([&] { add_named_variant(recipes, "x: train.lr"); }).find("'train.lr' is no KEY=VALUE") != std::string::npos);
}
