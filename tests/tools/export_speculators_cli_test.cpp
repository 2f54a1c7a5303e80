// `dflow export --format speculators`: the drafter in vllm-project/speculators'
// DFlash layout, naming its target (dense Qwen3, Qwen3-MoE, gpt-oss) as speculators'
// and vLLM's loaders read it, checked by tests/tools/check_speculators_export.py
// (json + safetensors in the venv); the default export stays z-lab's.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

// A 2-step run against `target` (the shared demo data: the tiny targets share its vocabulary).
fs::path trained_run(const fs::path& dir, const fs::path& target, std::vector<std::string> extra = {}) {
  extra.push_back("model.target.path=" + target.string());
  extra.push_back("run.max_steps=2");
  fs::create_directories(dir);
  const auto config = dir / "run.yaml";
  std::ofstream(config) << config::to_yaml(testing::small_run_config(dir / "run", extra));
  const auto o = run_dflow("train " + config.string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  return dir / "run";
}

testing::Outcome check_export(const fs::path& speculators, const fs::path& dflash, const fs::path& target,
                              const std::string& verifier_name) {
  REQUIRE_FALSE(::dflow::testing::python().empty());
  return testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                  "/tests/tools/check_speculators_export.py " + speculators.string() + " " +
                                  dflash.string() + " " + target.string() + " " + verifier_name,
                              120);
}

// Rising feature layers, none the 4-layer target's last (the DFlash formula
// repeats layer 1 on so shallow a target).
const std::vector<std::string> kServableLayers{"model.drafter.num_target_features=3",
                                               "model.drafter.target_layer_ids=[0, 1, 2]"};

void exports_name_the_target(const fs::path& dir, const fs::path& target) {
  const auto run = trained_run(dir, target, kServableLayers);
  auto o = run_dflow("export " + run.string() + " --out " + (dir / "dflash").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  // Without --verifier the run's own target (model.target.path) is named.
  o = run_dflow("export " + run.string() + " --out " + (dir / "spec").string() + " --format speculators");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("speculators format, dflash, verifier " + target.string()) != std::string::npos, o.output);
  o = check_export(dir / "spec", dir / "dflash", target, target.string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("ok") != std::string::npos, o.output);
  // A Hub id for the serving engine, read from a local copy.
  o = run_dflow("export " + run.string() + " --out " + (dir / "hub").string() +
                " --format speculators --verifier org/published-target --target " + target.string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  o = check_export(dir / "hub", dir / "dflash", target, "org/published-target");
  CHECK_MESSAGE(o.exit_code == 0, o.output);
}

}  // namespace

TEST_CASE("Cli.Export.speculators_format_names_a_dense_target") {
  const auto dir = testing::fresh_dir("export-spec-dense");
  exports_name_the_target(dir, testing::assets_dir() / "target");
  fs::remove_all(dir);
}

TEST_CASE("Cli.Export.speculators_format_names_a_qwen3_moe_target") {
  const auto dir = testing::fresh_dir("export-spec-moe");
  const auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --arch qwen3_moe");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  exports_name_the_target(dir, dir / "target");
  const auto config = nlohmann::json::parse(std::ifstream(dir / "spec" / "config.json"));
  CHECK(config["speculators_config"]["verifier"]["architectures"] == nlohmann::json::array({"Qwen3MoeForCausalLM"}));
  fs::remove_all(dir);
}

TEST_CASE("Cli.Export.speculators_format_names_a_gpt_oss_target") {
  const auto dir = testing::fresh_dir("export-spec-gpt-oss");
  const auto o = run_dflow("make-tiny-target --out " + (dir / "target").string() + " --arch gpt_oss");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  exports_name_the_target(dir, dir / "target");
  const auto config = nlohmann::json::parse(std::ifstream(dir / "spec" / "config.json"));
  CHECK(config["speculators_config"]["verifier"]["architectures"] == nlohmann::json::array({"GptOssForCausalLM"}));
  fs::remove_all(dir);
}

// A drafter with DSpark heads exports as speculators' DSpark model (its
// logits against DSparkDraftModel's: tests/drafter/test_speculators_reference.cpp).
TEST_CASE("Cli.Export.speculators_format_writes_dspark_for_a_drafter_with_heads") {
  const auto dir = testing::fresh_dir("export-spec-dspark");
  const auto target = testing::assets_dir() / "target";
  auto layers = kServableLayers;
  for (const std::string key : {"kind=dspark", "markov_rank=8", "markov_head=gated"})
    layers.push_back("model.drafter." + key);
  const auto run = trained_run(dir, target, layers);
  auto o = run_dflow("export " + run.string() + " --out " + (dir / "spec").string() + " --format speculators");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("speculators format, dspark, verifier") != std::string::npos, o.output);
  const auto config = nlohmann::json::parse(std::ifstream(dir / "spec" / "config.json"));
  CHECK(config["architectures"] == nlohmann::json::array({"DSparkSpeculator"}));
  CHECK(config["speculators_model_type"] == "dspark");
  CHECK(config["speculators_config"]["algorithm"] == "dspark");
  CHECK(config["markov_rank"] == 8);
  CHECK(config["markov_head_type"] == "gated");
  CHECK(config["enable_confidence_head"] == true);
  CHECK(config["confidence_head_with_markov"] == true);
  // dflow's blocks: the anchor is known, block_size - 1 tokens are proposed.
  CHECK(config["sample_from_anchor"] == false);
  CHECK(config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == config["block_size"].get<int>() - 1);
  CHECK_FALSE(config["transformer_layer_config"].contains("markov_rank"));
  const dflow::formats::SafetensorsFile weights(dir / "spec" / "model.safetensors");
  for (const std::string name : {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight",
                                 "markov_head.gate_proj.weight", "confidence_head.proj.weight", "fc.weight",
                                 "embed_tokens.weight", "lm_head.weight"}) {
    CAPTURE(name);
    CHECK(weights.contains(name));
  }
  fs::remove_all(dir);
}

// z-lab's layout cannot carry the heads (a DFlash server would draft without
// them): the default export refuses, writing nothing, and points at the
// format that can.
TEST_CASE("Cli.Export.default_format_refuses_a_drafter_with_dspark_heads") {
  const auto dir = testing::fresh_dir("export-dflash-dspark");
  const auto target = testing::assets_dir() / "target";
  auto layers = kServableLayers;
  for (const std::string key : {"kind=dspark", "markov_rank=8", "markov_head=gated"})
    layers.push_back("model.drafter." + key);
  const auto run = trained_run(dir, target, layers);
  for (const std::string format : {"", " --format dflash"}) {
    CAPTURE(format);
    const auto o = run_dflow("export " + run.string() + " --out " + (dir / "dflash").string() + format);
    CHECK(o.exit_code == 2);
    CHECK_MESSAGE(o.output.find("has DSpark heads (markov_rank 8 (gated), a confidence head)") != std::string::npos,
                  o.output);
    CHECK_MESSAGE(o.output.find("export it with --format speculators") != std::string::npos, o.output);
    CHECK_FALSE(fs::exists(dir / "dflash"));
  }
  fs::remove_all(dir);
}

TEST_CASE("Cli.Export.speculators_format_refuses_what_it_cannot_name") {
  const auto dir = testing::fresh_dir("export-spec-refuse");
  const auto target = testing::assets_dir() / "target";
  const auto run = trained_run(dir, target);
  const std::string spec = "export " + run.string() + " --format speculators --out " + (dir / "x").string();

  // The verifier flags belong to the speculators format.
  auto o = run_dflow("export " + run.string() + " --out " + (dir / "x").string() + " --verifier " + target.string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("--verifier: needs --format speculators") != std::string::npos, o.output);
  // --target also serves --dtype float16's activation check, and nothing else.
  o = run_dflow("export " + run.string() + " --out " + (dir / "x").string() + " --target " + target.string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("--target: needs --format speculators or --dtype float16") != std::string::npos,
                o.output);
  // A Hub id alone cannot be read.
  o = run_dflow(spec + " --verifier org/published-target");
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("pass --target DIR") != std::string::npos, o.output);
  // An exported drafter records no run, so no target.
  REQUIRE(run_dflow("export " + run.string() + " --out " + (dir / "plain").string()).exit_code == 0);
  o = run_dflow("export " + (dir / "plain").string() + " --format speculators --out " + (dir / "x").string());
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("pass --verifier NAME_OR_PATH") != std::string::npos, o.output);
  // A target whose config disagrees with the drafter.
  auto other = nlohmann::json::parse(std::ifstream(target / "config.json"));
  other["hidden_size"] = 96;
  fs::create_directories(dir / "other");
  std::ofstream(dir / "other" / "config.json") << other.dump();
  // It is another target than the drafter trained against (exit 2, naming
  // what differs); let through, the export's own check refuses its shape.
  o = run_dflow(spec + " --verifier " + (dir / "other").string());
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("config.json hidden_size: trained 64, given 96") != std::string::npos, o.output);
  o = run_dflow(spec + " --verifier " + (dir / "other").string() + " --allow-other-target");
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("config.json hidden_size is 96 but the drafter's is 64") != std::string::npos, o.output);
  CHECK_FALSE(fs::exists(dir / "x" / "config.json"));
  // The DFlash formula's repeated layer on this shallow target cannot be served so.
  o = run_dflow(spec);
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("target layers [1,1,1] (dflash_config.target_layer_ids) repeat or fall") !=
                    std::string::npos,
                o.output);

  // A drafter reading the target's last layer (3 of 4) has no speculators name.
  const auto last =
      trained_run(dir / "last", target, {"model.drafter.num_target_features=2", "model.drafter.target_layer_ids=[1, 3]"});
  o = run_dflow("export " + last.string() + " --format speculators --out " + (dir / "x").string());
  CHECK(o.exit_code == 1);
  CHECK_MESSAGE(o.output.find("reads target layer 3 (dflash_config.target_layer_ids), the target's last") !=
                    std::string::npos,
                o.output);
  CHECK(run_dflow("export " + last.string() + " --out " + (dir / "last-dflash").string()).exit_code == 0);
  fs::remove_all(dir);
}
