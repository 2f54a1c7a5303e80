// What a drafter was trained against follows it out of training: every
// checkpoint and export records the target, the data's template and the
// layers; `dflow inspect` prints it; `dflow eval --target`, `dflow export
// --target` and a resume compare it with the target they are given and
// refuse another one (a quantized or re-typed copy of the same model is
// allowed and named). `dflow export --dtype float16` is refused for a weight
// or an activation over the held-out prompts float16 cannot hold.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"
#include "target/hf_config.hpp"
#include "target/quantized_checkpoint.hpp"
#include "train/checkpoint.hpp"

using namespace dflow;
using testing::has;
using testing::run_dflow;
namespace fs = std::filesystem;

namespace {

// A copy of the target directory whose tensors pass through `change`
// (name, tensor) -> tensor, and whose config.json passes through `edit`.
fs::path target_copy(const fs::path& from, const fs::path& to,
                     const std::function<torch::Tensor(const std::string&, torch::Tensor)>& change,
                     const std::function<void(nlohmann::json&)>& edit = {}) {
  fs::create_directories(to);
  if (!change) {  // the same files
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  }
  for (const auto& entry : fs::directory_iterator(from))
    if (entry.path().extension() != ".safetensors") fs::copy_file(entry.path(), to / entry.path().filename());
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, tensor] : dflow::formats::load_checkpoint_dir(from))
    tensors.emplace_back(name, change(name, tensor.clone()));
  dflow::formats::write_safetensors(to / "model.safetensors", tensors, {{"format", "pt"}});
  if (edit) {
    nlohmann::json config = dflow::target::read_json_file(to / "config.json");
    edit(config);
    dflow::formats::write_json_atomically(to / "config.json", config);
  }
  return to;
}

nlohmann::json read_json(const fs::path& file) { return nlohmann::json::parse(std::ifstream(file)); }

// The demo trained one step by `dflow train` into root/run; its config.
config::Config one_step_run(const fs::path& root) {
  auto config = testing::small_run_config(root / "run", {"run.max_steps=1", "eval.every_steps=0"});
  std::ofstream(root / "run.yaml") << config::to_yaml(config);
  const auto o = run_dflow("train " + (root / "run.yaml").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  return config;
}

}  // namespace

TEST_CASE("Cli.TrainedAgainst.the_record_follows_the_drafter_and_another_target_is_refused") {
  const auto root = testing::fresh_dir("trained-against");
  const auto assets_target = testing::assets_dir() / "target";
  // The run trains against its own copy, so that the test can replace it.
  const auto target = target_copy(assets_target, root / "target", {});
  // Rising layers below the last: a speculators export can name them.
  auto config = testing::small_run_config(root / "run", {"model.target.path=" + target.string(), "eval.every_steps=0",
                                                         "checkpoint.every_steps=2",
                                                         "model.drafter.target_layer_ids=[0, 1, 2]"});
  std::ofstream(root / "run.yaml") << config::to_yaml(testing::stopped_after(config, 2));
  auto o = run_dflow("train " + (root / "run.yaml").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);

  const auto checkpoint = train::resolve_checkpoint(root / "run" / "checkpoints", "latest");
  const auto record = read_json(checkpoint / "drafter" / "trained_against.json");
  CHECK(record["version"] == 1);
  CHECK(record["target"]["path"] == target.string());
  CHECK(record["target"]["quantization"] == "none");
  CHECK(record["target"]["checkpoint_dtype"] == "float32");
  CHECK(record["target"]["config"]["num_hidden_layers"] ==
        dflow::target::read_json_file(target / "config.json")["num_hidden_layers"]);
  CHECK(record["target_layer_ids"] == nlohmann::json::array({0, 1, 2}));
  CHECK(record["hidden_states_indices"] == nlohmann::json::array({1, 2, 3}));
  CHECK(record["compute_dtype"] == "float32");
  REQUIRE(record["data"].size() == 1);
  CHECK(record["data"][0]["dir"] == (testing::assets_dir() / "data").string());
  // The manifest checks it as every other file of the checkpoint.
  CHECK(read_json(checkpoint / "manifest.json")["files"].contains("drafter/trained_against.json"));

  o = run_dflow("inspect " + (root / "run").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(has(o.output, "trained against"), o.output);
  CHECK_MESSAGE(has(o.output, "from layers [0, 1, 2] (Hugging Face hidden_states [1, 2, 3])"), o.output);

  // Both formats carry it: beside config.json and inside it.
  for (const std::string format : {"dflash", "speculators"}) {
    CAPTURE(format);
    const auto out = root / ("export-" + format);
    o = run_dflow("export " + (root / "run").string() + " --format " + format + " --out " + out.string());
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    CHECK(read_json(out / "trained_against.json") == record);
    CHECK(read_json(out / "config.json")["dflow_trained_against"] == record);
  }
  o = run_dflow("inspect " + (root / "export-dflash").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(has(o.output, "exported drafter"), o.output);
  CHECK_MESSAGE(has(o.output, "trained against"), o.output);
  CHECK_MESSAGE(has(o.output, "all tensors finite"), o.output);

  std::ofstream(root / "prompts.jsonl") << "{\"prompt_ids\": [5, 17, 99, 3, 42, 7, 8, 9]}\n";
  auto eval = [&](const fs::path& against, const std::string& extra = "") {
    return run_dflow("eval --target " + against.string() + " --drafter " + (root / "export-dflash").string() +
                     " --prompts " + (root / "prompts.jsonl").string() + " --max-new-tokens 8" + extra);
  };
  {
    INFO("the same target is said to be the one");
    o = eval(assets_target);
    CHECK_MESSAGE(o.exit_code == 0, o.output);
    CHECK_MESSAGE(has(o.output, "is the target the drafter was trained against (same files, at"), o.output);
  }
  {
    INFO("a copy stored in bfloat16 is allowed and named");
    const auto copy = target_copy(
        assets_target, root / "bf16", [](const std::string&, torch::Tensor t) { return t.to(torch::kBFloat16); },
        [](nlohmann::json& c) { c["torch_dtype"] = "bfloat16"; });
    o = eval(copy);
    CHECK_MESSAGE(o.exit_code == 0, o.output);
    CHECK_MESSAGE(has(o.output, "a copy in another dtype of the target the drafter was trained against"), o.output);
    CHECK_MESSAGE(has(o.output, "stored as: trained float32, given bfloat16"), o.output);
  }
  {
    INFO("an FP8 copy (the layers float8 E4M3 with scales) runs in-process, allowed and named");
    const auto fp8 = root / "fp8";
    const bool tied = dflow::target::read_json_file(assets_target / "config.json").value("tie_word_embeddings", false);
    dflow::target::testing::write_quantized_copy(assets_target, fp8, dflow::target::testing::QuantizedLayout::fp8_e4m3,
                                                 tied,
                                                 /*sharded=*/true);
    o = eval(fp8);
    CHECK_MESSAGE(o.exit_code == 0, o.output);
    CHECK_MESSAGE(has(o.output, "a quantized copy of the target the drafter was trained against"), o.output);
    CHECK_MESSAGE(has(o.output, "quantization: trained none, given fp8 (e4m3)"), o.output);
    CHECK_MESSAGE(has(o.output, "lossless: yes"), o.output);
  }
  {
    INFO("other layer weights with the same head are refused, and allowed when asked");
    const auto other = target_copy(assets_target, root / "finetuned", [](const std::string& name, torch::Tensor t) {
      return name.find("layers.0.mlp") != std::string::npos ? t * 1.5 : t;
    });
    o = eval(other);
    CHECK_MESSAGE(o.exit_code == 2, o.output);
    CHECK_MESSAGE(has(o.output, "other weights of the same model"), o.output);
    CHECK_MESSAGE(has(o.output, "--allow-other-target"), o.output);
    o = eval(other, " --allow-other-target");
    CHECK_MESSAGE(o.exit_code == 0, o.output);
    CHECK_MESSAGE(has(o.output, "lossless: yes"), o.output);
  }
  {
    INFO("another embedding is another target, at export too");
    const auto other = target_copy(assets_target, root / "other", [](const std::string& name, torch::Tensor t) {
      return name == "model.embed_tokens.weight" ? t * 1.25 : t;
    });
    o = eval(other);
    CHECK_MESSAGE(o.exit_code == 2, o.output);
    CHECK_MESSAGE(has(o.output, "another target than the drafter was trained against"), o.output);
    CHECK_MESSAGE(has(o.output, "embedding: trained"), o.output);
    const auto out = root / "export-other";
    o = run_dflow("export " + (root / "run").string() + " --format speculators --target " + other.string() +
                  " --out " + out.string());
    CHECK_MESSAGE(o.exit_code == 2, o.output);
    CHECK_MESSAGE(has(o.output, "another target"), o.output);
    CHECK_FALSE(fs::exists(out));
  }
  {
    INFO("a resume against replaced target files is refused before training");
    fs::remove_all(target);
    target_copy(assets_target, target, [](const std::string& name, torch::Tensor t) {
      return name.find("layers.1.self_attn") != std::string::npos ? t * 0.5 : t;
    });
    std::ofstream(root / "run.yaml", std::ios::trunc) << config::to_yaml(config);
    o = run_dflow("train " + (root / "run.yaml").string() + " --resume latest");
    CHECK_MESSAGE(o.exit_code == 2, o.output);
    CHECK_MESSAGE(has(o.output, "was trained against another target than " + target.string() + " holds now"), o.output);
    CHECK(train::list_checkpoints(root / "run" / "checkpoints").size() == 1);  // nothing written
  }
  fs::remove_all(root / "bf16");
  fs::remove_all(root / "fp8");
  fs::remove_all(root / "finetuned");
  fs::remove_all(root / "other");
}

TEST_CASE("Cli.Export.float16_is_refused_for_a_weight_beyond_its_range") {
  const auto root = testing::fresh_dir("export-fp16");
  (void)one_step_run(root);
  auto o = run_dflow("export " + (root / "run").string() + " --dtype float16 --out " + (root / "fp16").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(read_json(root / "fp16" / "config.json")["torch_dtype"] == "float16");
  CHECK(dflow::formats::SafetensorsFile(root / "fp16" / "model.safetensors").entry("fc.weight").dtype_name == "F16");
  o = run_dflow("export " + (root / "run").string() + " --out " + (root / "kept").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK(read_json(root / "kept" / "config.json")["torch_dtype"] == "float32");  // as trained (model.drafter.dtype)

  // One weight past float16's largest value (65504), in an exported drafter
  // given as the source.
  const auto big = root / "big";
  fs::copy(root / "kept", big);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : dflow::formats::load_checkpoint_dir(big)) {
    torch::Tensor copy = t.clone();
    if (name == "fc.weight") copy[0][0] = 7.0e4;
    tensors.emplace_back(name, copy);
  }
  dflow::formats::write_safetensors(big / "model.safetensors", tensors, {{"format", "pt"}});
  o = run_dflow("export " + big.string() + " --dtype float16 --out " + (root / "refused").string());
  CHECK_MESSAGE(o.exit_code == 2, o.output);
  CHECK_MESSAGE(has(o.output, "tensor 'fc.weight' holds 70000"), o.output);
  CHECK_MESSAGE(has(o.output, "beyond float16's range"), o.output);
  CHECK_FALSE(fs::exists(root / "refused"));
  o = run_dflow("export " + big.string() + " --dtype bfloat16 --out " + (root / "bf16").string());
  CHECK_MESSAGE(o.exit_code == 0, o.output);
  CHECK(read_json(root / "bf16" / "config.json")["torch_dtype"] == "bfloat16");
  fs::remove_all(root);
}

// Weights float16 holds, activations it does not: the export drafts the
// held-out prompts against the target first (the run's eval.prompts and
// model.target.path, or --prompts and --target) and refuses the point that
// overflows, writing nothing.
TEST_CASE("Cli.Export.float16_is_refused_for_an_activation_beyond_its_range_over_the_held_out_prompts") {
  const auto root = testing::fresh_dir("export-fp16-activations");
  const auto config = one_step_run(root);
  auto o = run_dflow("export " + (root / "run").string() + " --dtype float16 --out " + (root / "fp16").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  CHECK_MESSAGE(has(o.output, "float16: the drafter's activations over 8 held-out prompt(s) of " + config.eval.prompts +
                                  " peak at "),
                o.output);  // the file's first 8
  CHECK_MESSAGE(has(o.output, "within float16's range"), o.output);

  // Layer 0's MLP weights at 50, each far inside float16: its gated product
  // is silu(~50 * sum|x|) * ~50 * sum|x|, past 65504.
  o = run_dflow("export " + (root / "run").string() + " --out " + (root / "kept").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  const auto hot = root / "hot";
  fs::copy(root / "kept", hot);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : dflow::formats::load_checkpoint_dir(hot)) {
    torch::Tensor copy = t.clone();
    if (name == "layers.0.mlp.gate_proj.weight" || name == "layers.0.mlp.up_proj.weight") copy.fill_(50.0);
    tensors.emplace_back(name, copy);
  }
  dflow::formats::write_safetensors(hot / "model.safetensors", tensors, {{"format", "pt"}});
  // An exported drafter records no run: the prompts and the target are asked for.
  o = run_dflow("export " + hot.string() + " --dtype float16 --out " + (root / "refused").string());
  CHECK_MESSAGE(o.exit_code == 2, o.output);
  CHECK_MESSAGE(has(o.output, "records no run whose eval.prompts to use: give --prompts FILE and --target DIR"),
                o.output);
  o = run_dflow("export " + hot.string() + " --dtype float16 --prompts " + config.eval.prompts + " --target " +
                config.model.target.path + " --out " + (root / "refused").string());
  CHECK_MESSAGE(o.exit_code == 2, o.output);
  CHECK_MESSAGE(has(o.output, "activation 'layers.0.mlp (act(gate_proj) * up_proj)' reaches "), o.output);
  CHECK_MESSAGE(has(o.output, "beyond float16's range (+-65504)"), o.output);
  CHECK_FALSE(fs::exists(root / "refused"));
  // --prompts belongs to the float16 check alone.
  o = run_dflow("export " + hot.string() + " --prompts " + config.eval.prompts + " --out " + (root / "bf16").string());
  CHECK_MESSAGE(o.exit_code != 0, o.output);
  CHECK_MESSAGE(has(o.output, "--prompts: needs --dtype float16"), o.output);
  fs::remove_all(root);
}
