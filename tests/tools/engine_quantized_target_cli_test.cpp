// `dflow train` with features.engine over a target stored as large 2026
// targets ship (its layers FP8 E4M3 with scales, quant_method fp8, two
// shards): the run reads only the head, skipping the FP8 tensors, and trains
// step for step as over the unquantized target; `dflow export --format
// speculators` then reads the same head from it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "../nodes/engine_files.hpp"
#include "config/config.hpp"
#include "target/quantized_checkpoint.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

// Rising feature layers, none the target's last (what a speculators export serves): engine ids [1, 2, 3] + 4.
const std::vector<std::string> kLayers{"model.drafter.num_target_features=3", "model.drafter.target_layer_ids=[0, 1, 2]"};
const char* const kEngineParams = "engine_layer_ids: [1, 2, 3, 4], dtype: float32";

// The run over `target` reading the engine files in `hs`, written as run.yaml in `dir`.
fs::path write_engine_run(const fs::path& dir, const fs::path& target, const fs::path& hs) {
  std::vector<std::string> extra = kLayers;
  for (const std::string& o : {"model.target.path=" + target.string(), std::string("run.max_steps=4"),
                               std::string("train.epochs=1"), std::string("eval.every_steps=0"),
                               "eval.prompts=" + (dir / "no-heldout.jsonl").string(), std::string("run.log_level=info")})
    extra.push_back(o);
  fs::create_directories(dir);
  const auto config = dir / "run.yaml";
  std::ofstream(config) << config::to_yaml(testing::from_engine(testing::small_run_config(dir / "run", extra), hs, kEngineParams));
  return config;
}

}  // namespace

TEST_CASE("Cli.EngineFeatures.a_head_only_run_trains_over_an_fp8_stored_target_and_exports") {
  const auto dir = testing::fresh_dir("engine-fp8-target");
  const fs::path original = testing::assets_dir() / "target", fp8 = dir / "target-fp8", hs = dir / "hs";
  // The engine's files: the original target's features, as target_forward computes them.
  testing::write_dflow_features_as_engine_files(testing::small_run_config(dir / "writer", kLayers), hs);
  // The same target with its layers stored FP8 (the demo target is untied: so is the copy).
  REQUIRE_FALSE(dflow::target::read_json_file(original / "config.json").value("tie_word_embeddings", true));
  dflow::target::testing::write_quantized_copy(original, fp8, dflow::target::testing::QuantizedLayout::fp8_e4m3,
                                               /*tied=*/false,
                                               /*sharded=*/true);
  const std::string down_proj = "model.layers.0.mlp.down_proj.weight";
  const auto shard = dflow::formats::read_checkpoint_index(fp8, fp8 / "model.safetensors.index.json").at(down_proj);
  REQUIRE(dflow::formats::SafetensorsFile(fp8 / shard).entry(down_proj).dtype_name == "F8_E4M3");

  auto o = run_dflow("train " + write_engine_run(dir / "fp8", fp8, hs).string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("head only") != std::string::npos, o.output);
  o = run_dflow("train " + write_engine_run(dir / "plain", original, hs).string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto over_fp8 = testing::step_records(dir / "fp8" / "run");
  REQUIRE(over_fp8.size() == 4);
  CHECK(over_fp8 == testing::step_records(dir / "plain" / "run"));  // the head is the same tensors, bit for bit

  // The export reads the verifier's head from the FP8 copy (the run's model.target.path).
  o = run_dflow("export " + (dir / "fp8" / "run").string() + " --out " + (dir / "spec-fp8").string() +
                " --format speculators");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  o = run_dflow("export " + (dir / "plain" / "run").string() + " --out " + (dir / "spec-plain").string() +
                " --format speculators");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto from_fp8 = dflow::formats::SafetensorsFile(dir / "spec-fp8" / "model.safetensors").all_tensors();
  const auto from_plain = dflow::formats::SafetensorsFile(dir / "spec-plain" / "model.safetensors").all_tensors();
  for (const char* name : {"embed_tokens.weight", "lm_head.weight"}) {
    CAPTURE(name);
    CHECK(torch::equal(from_fp8.at(name), from_plain.at(name)));
  }
  fs::remove_all(dir);
}
