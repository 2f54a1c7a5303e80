// Every command that takes a target, on the mixture-of-experts targets
// make-tiny-target writes (Qwen3-MoE, gpt-oss; the echo pattern, as the
// demo's): the demo's data made with the target, training with online
// features and tau, with features cached by `dflow cache-features` and
// hybrid-filled, `dflow eval` greedy (lossless) and sampled, `export`, `replay`, and
// `dflow regenerate` from prompts (with --features) and from chats. The same
// commands' behaviour is tested in depth on the dense target elsewhere; here
// each runs once on each family, in seconds.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../nodes/train_fixture.hpp"
#include "../text/text_fixtures.hpp"
#include "config/config.hpp"
#include "run_command.hpp"
#include "train/demo_target.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

struct MoeAssets {
  fs::path dir, target, data, heldout;
};

// The demo's assets with a tiny echo target of `arch`: the target made as
// the demo makes its own, then the demo's data regenerated with it.
MoeAssets moe_assets(const std::string& arch) {
  MoeAssets a;
  a.dir = testing::fresh_dir("moe-" + arch);
  a.target = a.dir / "target";
  a.data = a.dir / "data";
  a.heldout = a.dir / "heldout.jsonl";
  train::make_demo_target(a.target, 0, arch);
  const auto config = config::load_config("", {"model.target.path=" + a.target.string(), "data.train=[" + a.data.string() + "]",
                                               "data.max_length=128", "data.buckets=[64, 128]",
                                               "eval.prompts=" + a.heldout.string()});
  train::DemoDataOptions options;
  options.num_prompts = 48;
  options.max_prompt_tokens = 24;
  options.max_new_tokens = 40;
  options.heldout_prompts = 4;
  torch::set_num_threads(1);
  train::ensure_demo_assets(config, options);
  return a;
}

config::Config run_config(const MoeAssets& a, const fs::path& out_dir, std::vector<std::string> extra) {
  std::vector<std::string> o{"model.target.path=" + a.target.string(), "data.train=[" + a.data.string() + "]",
                             "run.out_dir=" + out_dir.string(), "data.max_length=128", "data.buckets=[64, 128]",
                             "data.tokens_per_batch=1024", "train.grad_accum=1", "metrics.sinks=[jsonl]",
                             "checkpoint.every_steps=0", "eval.prompts=" + a.heldout.string(), "eval.max_prompts=2",
                             "eval.max_new_tokens=16", "run.log_level=info", "run.threads=1", "run.torch_threads=1"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config("", o);
}

fs::path write_config(const fs::path& path, const config::Config& config) {
  std::ofstream(path) << config::to_yaml(config);
  return path;
}

// The run's target node reads features from `cache` (filled as it trains when `fill`).
config::Config with_cached_features(config::Config config, const fs::path& cache, bool fill) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + cache.string() + ", shard_mb: 1" + (fill ? ", fill: true, dtype: float32}" : "}")));
    }
  return config;
}

void every_command_takes_the_target(const std::string& arch) {
  const MoeAssets a = moe_assets(arch);
  REQUIRE(fs::exists(a.data));
  REQUIRE(fs::exists(a.heldout));
  const std::string target = a.target.string();

  // Online features, tau measured by the eval node, a final checkpoint.
  const auto online = a.dir / "online";
  auto o = run_dflow("train " + write_config(a.dir / "online.yaml", run_config(a, online, {"run.max_steps=3"})).string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto evals = testing::records_of_kind(online, "eval");
  REQUIRE_FALSE(evals.empty());
  CHECK(evals.back()["mean_tau"].get<double>() >= 1.0);

  // Speculative decoding with the trained drafter: greedy is lossless, sampling runs.
  const std::string eval = "eval --target " + target + " --drafter " + online.string() + " --prompts " +
                           a.heldout.string() + " --max-new-tokens 16";
  o = run_dflow(eval + " --json " + (a.dir / "eval.json").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("lossless: yes") != std::string::npos, o.output);
  // The exported drafter (z-lab's layout) drafts exactly the same.
  o = run_dflow("export " + online.string() + " --out " + (a.dir / "exported").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  o = run_dflow("eval --target " + target + " --drafter " + (a.dir / "exported").string() + " --prompts " +
                a.heldout.string() + " --max-new-tokens 16 --json " + (a.dir / "eval-exported.json").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(nlohmann::json::parse(std::ifstream(a.dir / "eval-exported.json"))["tau_histogram"] ==
        nlohmann::json::parse(std::ifstream(a.dir / "eval.json"))["tau_histogram"]);
  o = run_dflow(eval + " --temperature 0.8 --seed 3");
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("sampled at temperature") != std::string::npos, o.output);

  o = run_dflow("replay " + (online / "checkpoints" / "step-3").string() + " --samples 0,1");
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("sample 1") != std::string::npos, o.output);

  // The capture pass, then a run that never runs the target; and a hybrid fill.
  const auto cached = write_config(a.dir / "cached.yaml",
                                   with_cached_features(run_config(a, a.dir / "cached", {"run.max_steps=2"}), a.dir / "cache", false));
  o = run_dflow("cache-features " + cached.string() + " --dtype float32");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  o = run_dflow("train " + cached.string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("the target is not run") != std::string::npos, o.output);
  const auto hybrid = write_config(a.dir / "hybrid.yaml", with_cached_features(run_config(a, a.dir / "hybrid", {"run.max_steps=2"}),
                                                                               a.dir / "hybrid-cache", true));
  o = run_dflow("train " + hybrid.string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);

  // Regeneration: prompts with features from the same pass, and chats.
  o = run_dflow("regenerate --target " + target + " --prompts " + a.heldout.string() + " --max-new-tokens 8 --out " +
                (a.dir / "regen.jsonl").string() + " --features " + (a.dir / "regen-features").string() +
                " --num-target-features 2");
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("features: 4 samples") != std::string::npos, o.output);
  text::test::write_json(a.target / "tokenizer.json", text::test::tiny_tokenizer_json());
  std::ofstream(a.dir / "chats.jsonl")
      << R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "old"}]})" << "\n";
  o = run_dflow("regenerate --target " + target + " --chats " + (a.dir / "chats.jsonl").string() +
                " --chat-template chatml --max-new-tokens 6 --out " + (a.dir / "chats-out.jsonl").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(fs::exists(a.dir / "chats-out.jsonl"));
  fs::remove_all(a.dir);
}

}  // namespace

TEST_CASE("Cli.MakeTinyTarget.arch_options_shape_the_experts_and_a_preset_can_be_shallower") {
  const auto dir = testing::fresh_dir("cli-arch");
  auto o = run_dflow("make-tiny-target --out " + (dir / "q").string() +
                     " --arch qwen3_moe --layers 2 --experts 4 --experts-per-token 2 --mlp-only-layers 0");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("Qwen3MoeForCausalLM, 2 layers") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("4 experts (top 2)") != std::string::npos, o.output);
  const auto config = nlohmann::json::parse(std::ifstream(dir / "q" / "config.json"));
  CHECK(config["mlp_only_layers"] == nlohmann::json::array({0}));
  CHECK(config["num_experts"] == 4);
  // An echo head in gpt-oss's sliding layer 0 that could not see its lag is refused, naming both.
  o = run_dflow("make-tiny-target --out " + (dir / "g").string() + " --arch gpt_oss --pattern echo --sliding-window 8");
  CHECK(o.exit_code != 0);
  CHECK_MESSAGE(o.output.find("sliding layer of 8 tokens") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("echo_lag 16") != std::string::npos, o.output);
  CHECK(run_dflow("make-tiny-target --out " + (dir / "x").string() + " --arch llama").exit_code == 2);
  // A preset fixes the architecture; --preset-layers needs a preset and keeps every other shape.
  CHECK(run_dflow("make-tiny-target --out " + (dir / "x").string() + " --preset qwen3-30b-a3b --arch qwen3").exit_code == 2);
  CHECK(run_dflow("make-tiny-target --out " + (dir / "x").string() + " --preset-layers 2").exit_code == 2);
  fs::remove_all(dir);
}

TEST_CASE("Cli.MakeTinyTarget.qwen3_5_archs_take_the_linear_attention_options_and_refuse_echo") {
  const auto dir = testing::fresh_dir("cli-qwen3_5");
  auto o = run_dflow("make-tiny-target --out " + (dir / "m").string() +
                     " --arch qwen3_5_moe --layers 3 --layer-types linear_attention,full_attention,linear_attention"
                     " --linear-key-heads 2 --linear-value-heads 6 --linear-conv-kernel 3 --head-dim 32"
                     " --partial-rotary-factor 0.5 --experts 4 --shared-expert-intermediate-size 24");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(o.output.find("Qwen3_5MoeForConditionalGeneration, 3 layers") != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find("4 experts (top 2)") != std::string::npos, o.output);
  const auto config = nlohmann::json::parse(std::ifstream(dir / "m" / "config.json"));
  const auto& text = config["text_config"];
  CHECK(text["layer_types"] == nlohmann::json({"linear_attention", "full_attention", "linear_attention"}));
  CHECK(text["linear_num_value_heads"] == 6);
  CHECK(text["linear_conv_kernel_dim"] == 3);
  CHECK(text["head_dim"] == 32);
  CHECK(text["rope_parameters"]["partial_rotary_factor"] == 0.5);
  CHECK(text["shared_expert_intermediate_size"] == 24);
  // The echo pattern's mechanism is an attention head in layer 0: refused, naming why.
  o = run_dflow("make-tiny-target --out " + (dir / "e").string() + " --arch qwen3_5 --pattern echo");
  CHECK(o.exit_code != 0);
  CHECK_MESSAGE(o.output.find("Gated DeltaNet layers") != std::string::npos, o.output);
  o = run_dflow("make-tiny-target --out " + (dir / "v").string() + " --arch qwen3_5 --linear-value-heads 3");
  CHECK(o.exit_code != 0);
  CHECK_MESSAGE(o.output.find("not a multiple of linear key heads 2") != std::string::npos, o.output);
  // The preset fixes its shapes.
  CHECK(run_dflow("make-tiny-target --out " + (dir / "x").string() + " --preset qwen3.5-35b-a3b --linear-key-heads 4")
            .exit_code == 2);
  fs::remove_all(dir);
}

TEST_CASE("Cli.MoeTargets.qwen3_moe_every_command_that_takes_a_target_runs_it") {
  every_command_takes_the_target("qwen3_moe");
}

TEST_CASE("Cli.MoeTargets.gpt_oss_every_command_that_takes_a_target_runs_it") {
  every_command_takes_the_target("gpt_oss");
}
