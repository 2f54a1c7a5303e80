// The head-only path for a Qwen3.5-MoE-shaped multimodal wrapper (a tiny
// Qwen3_5MoeForConditionalGeneration written by transformers,
// tests/target/hf_wrapper_checkpoints.py), as docs/targets.md walks a user
// through it: engine files written by tools/write_engine_features.py, `dflow
// train` with ce and with kl, `dflow export`, the exported config read back.
// A wrapper dflow does not run in-process (Qwen3-VL's) is refused naming its
// class, as is kl for a wrapper whose norm dflow does not know (Qwen3.5/3.6
// itself runs in-process: tests/target/test_qwen3_5_reference.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "../nodes/engine_files.hpp"
#include "config/config.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"
#include "target/hf_config.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(testing::dflow_binary() + " " + args, 300);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A run over `target` reading the engine files in `hs` ([1, 2] and the last
// layer 4 appended), written as run.yaml in `dir`; `drafter` the drafter node's params.
fs::path write_run(const fs::path& dir, const fs::path& target, const fs::path& data, const fs::path& hs,
                   const std::string& drafter = "{}") {
  const std::vector<std::string> extra = {
      "model.target.path=" + target.string(), "data.train=[" + data.string() + "]",
      "model.drafter.num_target_features=2", "model.drafter.target_layer_ids=[0, 1]", "model.drafter.num_layers=1",
      "model.drafter.mask_token_id=299", "run.max_steps=3", "train.epochs=1", "eval.every_steps=0",
      "eval.prompts=" + (dir / "no-heldout.jsonl").string(), "run.log_level=info"};
  auto config = testing::from_engine(testing::small_run_config(dir / "run", extra), hs,
                                     "engine_layer_ids: [1, 2, 4], dtype: float32");
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load(drafter));
  fs::create_directories(dir);
  std::ofstream(dir / "run.yaml") << config::to_yaml(config);
  return dir / "run.yaml";
}

}  // namespace

TEST_CASE("Cli.EngineFeatures.a_qwen3_5_moe_wrapper_trains_head_only_with_ce_and_kl_and_exports") {
  REQUIRE_FALSE(testing::python().empty());
  const auto dir = testing::fresh_dir("engine-wrapper");
  auto o = testing::run_command(testing::python() + " " + testing::source_dir() +
                                    "/tests/target/hf_wrapper_checkpoints.py " + (dir / "targets").string(),
                                600);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const fs::path target = dir / "targets" / "qwen3_5-moe-untied-single", hs = dir / "hs";
  const fs::path jsonl = testing::prepare_small_vocabulary_data(dir);
  o = testing::run_command(testing::python() + " " + testing::source_dir() + "/tools/write_engine_features.py --target " +
                               target.string() + " --samples " + jsonl.string() + " --out " + hs.string() +
                               " --layer-ids 1 2 --dtype float32",
                           600);
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(has(o.output, "\"layer_ids\": [1, 2, 4]"));  // every layer counts, linear attention and full

  o = run_dflow("train " + write_run(dir / "ce", target, dir / "data", hs).string());
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
  const auto exported = model::read_json_file(dir / "exported" / "config.json");
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
  const auto reference = model::SafetensorsFile(target / "reference.safetensors").all_tensors();
  const auto spec = model::SafetensorsFile(dir / "spec" / "model.safetensors").all_tensors();
  CHECK(torch::equal(spec.at("embed_tokens.weight"), reference.at("embedding")));
  CHECK(torch::equal(spec.at("lm_head.weight"), reference.at("lm_head")));

  // In-process, a wrapper dflow does not run: refused naming the class, pointing to features.engine.
  const fs::path vl = dir / "vl";
  fs::copy(target, vl);
  auto vl_config = model::read_json_file(vl / "config.json");
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
  auto config = model::read_json_file(foo / "config.json");
  config["architectures"] = {"FooForConditionalGeneration"};
  std::ofstream(foo / "config.json") << config.dump();
  o = run_dflow("train " + write_run(dir / "foo-kl", foo, dir / "data", hs, "{loss: kl}").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(has(o.output, "dflow does not know how FooForConditionalGeneration"), o.output);
  fs::remove_all(dir);
}
