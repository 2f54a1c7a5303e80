// What issue 35 is for, end to end: a drafter for a target dflow cannot run
// (Qwen3-MoE, gpt-oss; small random checkpoints written by transformers)
// trained from the hidden-state files an engine writes for it (here
// tools/write_engine_features.py, Hugging Face's forward with hooks), with
// only the target's embedding and LM head loaded.
#include <doctest/doctest.h>

#include <cmath>

#include "engine_files.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dflow;
using namespace dflow::testing;

// tests/target/hf_random_checkpoints.py's checkpoints (vocabulary 300, 2 layers), written once.
const fs::path& foreign_checkpoints() {
  static const fs::path dir = [] {
    const auto d = fresh_dir("foreign-targets");
    const auto o = run_command(python() + " " + source_dir() + "/tests/target/hf_random_checkpoints.py " + d.string(), 300);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return d;
  }();
  return dir;
}

void trains_from_engine_files_head_only(const std::string& checkpoint) {
  const fs::path target = foreign_checkpoints() / checkpoint;
  const auto dir = fresh_dir("foreign-" + checkpoint);
  const auto jsonl = prepare_small_vocabulary_data(dir);
  // Engine ids [1, 2]: the output of layer 0, then the last layer's before the final norm (appended).
  const auto written = run_command(python() + " " + source_dir() + "/tools/write_engine_features.py --target " +
                                       target.string() + " --samples " + jsonl.string() + " --out " +
                                       (dir / "hs").string() + " --layer-ids 1 --dtype float32",
                                   600);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);

  auto config = from_engine(
      small_run_config(dir / "run", {"model.target.path=" + target.string(), "data.train=[" + (dir / "data").string() + "]",
                                     "model.drafter.target_layer_ids=[]", "model.drafter.num_layers=1",
                                     "model.drafter.mask_token_id=299", "eval.every_steps=0",
                                     "eval.prompts=" + (dir / "no-heldout.jsonl").string(), "run.max_steps=4"}),
      dir / "hs", "engine_layer_ids: [1, 2], dtype: float32");
  {
    const nodes::RunContext run(config, {}, nullptr);
    CHECK(run.targets.empty());  // nothing of the experts was loaded
    CHECK(run.feature_layer_ids == std::vector<int64_t>{0});  // filled from the files' slots
    CHECK(run.target_config.num_hidden_layers == 2);
    CHECK(run.target_head->embedding_weight().size(0) == 300);
  }
  nodes::run_training(config, {});
  const auto steps = records_of_kind(dir / "run", "step");
  REQUIRE(steps.size() == 4);
  std::set<double> losses;
  for (const auto& s : steps) {
    const double loss = s.at("loss").get<double>();
    CHECK(std::isfinite(loss));
    CHECK(s.at("excluded_samples").get<int64_t>() == 0);
    losses.insert(loss);
  }
  CHECK(losses.size() > 1);  // the drafter learns from the files, step after step
}

}  // namespace

TEST_CASE("EngineFeatures.a_drafter_for_a_qwen3_moe_target_trains_from_its_engine_files_head_only") {
  trains_from_engine_files_head_only("qwen3-moe-untied-sharded");
}

TEST_CASE("EngineFeatures.a_drafter_for_a_gpt_oss_target_trains_from_its_engine_files_head_only") {
  trains_from_engine_files_head_only("gpt-oss-tied-sharded");
}
