// The head-only path for a Qwen3.5-MoE-shaped multimodal wrapper (a tiny
// Qwen3_5MoeForConditionalGeneration written by transformers,
// tests/target/hf_wrapper_checkpoints.py), as docs/targets.md walks a user
// through it: engine files written by tools/write_engine_features.py, `dflow
// train` with ce and with kl, `dflow export`, the exported config read back.
// The same drafter trained in-process (dflow's own Qwen3.5-MoE forward) equals
// the run from those files record for record. A wrapper dflow does not run
// in-process (Qwen3-VL's) is refused naming its class, as is kl for a wrapper
// whose norm dflow does not know.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "../nodes/engine_files.hpp"
#include "config/config.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"
#include "target/hf_config.hpp"
#include "test_paths.hpp"

using namespace dflow;
using testing::has;
using testing::run_dflow;
namespace fs = std::filesystem;

namespace {

// A run over `target` reading the engine files in `hs` ([1, 2] and the last
// layer 4 appended), written as run.yaml in `dir`; `drafter` the drafter node's
// params. Without `hs`, the run computes the same features in-process.
fs::path write_run(const fs::path& dir, const fs::path& target, const fs::path& data, const fs::path& hs,
                   const std::string& drafter = "{}") {
  const std::vector<std::string> extra = {
      "model.target.path=" + target.string(), "data.train=[" + data.string() + "]",
      "model.drafter.num_target_features=2", "model.drafter.target_layer_ids=[0, 1]", "model.drafter.num_layers=1",
      "model.drafter.mask_token_id=299", "model.target.dtype=float32", "run.max_steps=3", "train.epochs=1",
      "eval.every_steps=0", "eval.prompts=" + (dir / "no-heldout.jsonl").string(), "run.log_level=info"};
  auto config = testing::small_run_config(dir / "run", extra);
  if (!hs.empty()) config = testing::from_engine(config, hs, "engine_layer_ids: [1, 2, 4], dtype: float32");
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load(drafter));
  fs::create_directories(dir);
  std::ofstream(dir / "run.yaml") << config::to_yaml(config);
  return dir / "run.yaml";
}

// The tiny Qwen3.5-MoE wrapper (vision tower included) written by
// transformers, the data, and engine files of layers 1, 2 and the last
// written from it by transformers' forward in float32: made once per process.
struct Wrapper {
  fs::path dir, target, hs;
};

const Wrapper& wrapper() {
  static const Wrapper w = [] {
    Wrapper made;
    made.dir = testing::fresh_dir("engine-wrapper");
    auto o = testing::run_command(testing::python() + " " + testing::source_dir() +
                                      "/tests/target/hf_wrapper_checkpoints.py " + (made.dir / "targets").string(),
                                  600);
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    made.target = made.dir / "targets" / "qwen3_5-moe-untied-single";
    made.hs = made.dir / "hs";
    const fs::path jsonl = testing::prepare_small_vocabulary_data(made.dir);
    o = testing::run_command(testing::python() + " " + testing::source_dir() +
                                 "/tools/write_engine_features.py --target " + made.target.string() + " --samples " +
                                 jsonl.string() + " --out " + made.hs.string() + " --layer-ids 1 2 --dtype float32",
                             600);
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    CHECK(has(o.output, "\"layer_ids\": [1, 2, 4]"));  // every layer counts, linear attention and full
    return made;
  }();
  return w;
}

}  // namespace

TEST_CASE("Cli.EngineFeatures.a_qwen3_5_moe_wrapper_trains_head_only_with_ce_and_kl_and_exports") {
  REQUIRE_FALSE(testing::python().empty());
  const fs::path dir = wrapper().dir, target = wrapper().target, hs = wrapper().hs;
  auto o = run_dflow("train " + write_run(dir / "ce", target, dir / "data", hs).string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(has(o.output, "(Qwen3_5MoeForConditionalGeneration) head only"));
  CHECK(has(o.output, "drafter MLP width 192: the target's config has no dense intermediate_size"));
  CHECK(testing::step_records(dir / "ce" / "run").size() == 3);

  o = run_dflow("train " + write_run(dir / "kl", target, dir / "data", hs, "{loss: kl}").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(has(o.output, "and final norm"));  // the kl teacher's, applied as Qwen3.5 does (1 + weight)
  const auto kl_steps = testing::step_records(dir / "kl" / "run");
  REQUIRE(kl_steps.size() == 3);
  CHECK(kl_steps != testing::step_records(dir / "ce" / "run"));

  // The exported drafter carries the text model's sizes, vocabulary and the mask token.
  o = run_dflow("export " + (dir / "kl" / "run").string() + " --out " + (dir / "exported").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto exported = dflow::target::read_json_file(dir / "exported" / "config.json");
  CHECK(exported.at("hidden_size") == 64);
  CHECK(exported.at("intermediate_size") == 192);
  CHECK(exported.at("num_attention_heads") == 4);
  CHECK(exported.at("num_key_value_heads") == 2);
  CHECK(exported.at("head_dim") == 16);
  CHECK(exported.at("vocab_size") == 300);
  CHECK(exported.at("num_target_layers") == 4);
  CHECK(exported.at("dflash_config").at("mask_token_id") == 299);
  CHECK(exported.at("dflash_config").at("target_layer_ids") == nlohmann::json::array({0, 1}));
  // speculators' layout carries the wrapper's embedding, read by its names.
  o = run_dflow("export " + (dir / "kl" / "run").string() + " --out " + (dir / "spec").string() +
                " --format speculators");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto reference = dflow::formats::SafetensorsFile(target / "reference.safetensors").all_tensors();
  const auto spec = dflow::formats::SafetensorsFile(dir / "spec" / "model.safetensors").all_tensors();
  CHECK(torch::equal(spec.at("embed_tokens.weight"), reference.at("embedding")));
  CHECK(torch::equal(spec.at("lm_head.weight"), reference.at("lm_head")));

  // In-process, a wrapper dflow does not run: refused naming the class, pointing to features.engine.
  const fs::path vl = dir / "vl";
  fs::copy(target, vl);
  auto vl_config = dflow::target::read_json_file(vl / "config.json");
  vl_config["architectures"] = {"Qwen3VLMoeForConditionalGeneration"};
  vl_config["model_type"] = "qwen3_vl_moe";
  std::ofstream(vl / "config.json") << vl_config.dump();
  std::ofstream(dir / "in-process.yaml")
      << config::to_yaml(testing::small_run_config(dir / "in-process", {"model.target.path=" + vl.string()}));
  o = run_dflow("train " + (dir / "in-process.yaml").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(has(o.output, "is Qwen3VLMoeForConditionalGeneration, which dflow cannot run: a multimodal wrapper"),
                o.output);
  CHECK(has(o.output, "features.engine"));

  // kl over a wrapper whose norm dflow does not know: refused, never computed as Qwen3's.
  const fs::path foo = dir / "foo";
  fs::copy(target, foo);
  auto config = dflow::target::read_json_file(foo / "config.json");
  config["architectures"] = {"FooForConditionalGeneration"};
  std::ofstream(foo / "config.json") << config.dump();
  o = run_dflow("train " + write_run(dir / "foo-kl", foo, dir / "data", hs, "{loss: kl}").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(has(o.output, "dflow does not know how FooForConditionalGeneration"), o.output);
}

// Issue 53's check of dflow's Qwen3.5-MoE forward inside a training run: the
// drafter trained in-process on the wrapper sees the same batches, features and
// (for kl) teacher as the run from transformers' files, so every step record
// agrees within float32 accumulation (the two forwards sum in different
// orders). A forward that drifted (a norm scaled by weight instead of 1 +
// weight, a state carried across rows, the wrong layer's output) moves the
// loss by far more than the bound.
TEST_CASE("Cli.EngineFeatures.a_qwen3_5_moe_drafter_trained_in_process_equals_the_run_from_transformers_files") {
  REQUIRE_FALSE(testing::python().empty());
  const fs::path dir = wrapper().dir, target = wrapper().target, hs = wrapper().hs;
  for (const std::string loss : {"ce", "kl"}) {
    CAPTURE(loss);
    const std::string drafter = "{loss: " + loss + "}";
    auto o = run_dflow("train " + write_run(dir / ("files-" + loss), target, dir / "data", hs, drafter).string());
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    o = run_dflow("train " + write_run(dir / ("in-process-" + loss), target, dir / "data", {}, drafter).string());
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    CHECK_MESSAGE(has(o.output, "Qwen3_5MoeForConditionalGeneration"), o.output);
    const auto want = testing::step_records(dir / ("files-" + loss) / "run");
    const auto got = testing::step_records(dir / ("in-process-" + loss) / "run");
    REQUIRE(want.size() == 3);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i]["sample_ids"] == want[i]["sample_ids"]);
      CHECK(got[i]["anchors"] == want[i]["anchors"]);
      CHECK(got[i]["real_tokens"] == want[i]["real_tokens"]);
      for (const char* key : {"loss", "grad_norm"}) {
        CAPTURE(key);
        const double a = got[i][key].get<double>(), b = want[i][key].get<double>();
        CHECK(std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)));
      }
    }
  }
}
