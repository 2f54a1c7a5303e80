// `dflow init CHECKPOINT_DIR`: the config it writes for a target is one that
// `dflow config` accepts and `dflow train` trains, with the feature layers
// of z-lab's rule, the feature source dflow can use for the target, and each
// choice said in a comment; what it cannot read is refused naming the file
// and key, exit 2.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../nodes/train_fixture.hpp"
#include "data/feature_cache.hpp"
#include "formats/safetensors.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "text/byte_level.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args, int limit_s = 120) {
  return testing::run_command(testing::dflow_binary() + " " + args, limit_s);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string without(std::string text, const std::string& part) {
  REQUIRE(has(text, part));
  return text.erase(text.find(part), part.size());
}

// A checkpoint directory holding only config.json: what dflow init reads.
fs::path config_only(const fs::path& dir, const std::string& json) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  return dir;
}

std::string qwen3_config(int layers, const std::string& architecture = "Qwen3ForCausalLM",
                         const std::string& model_type = "qwen3") {
  return R"({"architectures": [")" + architecture + R"("], "model_type": ")" + model_type +
         R"(", "hidden_size": 64, "num_hidden_layers": )" + std::to_string(layers) +
         R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
             "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
             "hidden_act": "silu", "tie_word_embeddings": false, "dflow_mask_token_id": 999})";
}

// A Qwen3-8B-wide (hidden 4096) config of 36 layers, the rest qwen3_config's.
std::string qwen3_4096_config() {
  std::string json = qwen3_config(36);
  const std::string narrow = "\"hidden_size\": 64";
  return json.replace(json.find(narrow), narrow.size(), "\"hidden_size\": 4096");
}

// dflow init of `dir` with --memory-gib `memory` and the drafter's `loss`:
// the GiB figure its fit line gives right after `key`.
double init_gib(const fs::path& dir, const std::string& memory, const std::string& loss, const std::string& key) {
  auto o = run_dflow("init " + dir.string() + " --memory-gib " + memory + " --set pipeline.nodes.drafter.params.loss=" + loss);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const auto at = o.output.find(key);
  REQUIRE(at != std::string::npos);
  return std::stod(o.output.substr(at + key.size()));
}

}  // namespace

TEST_CASE("Cli.Init.a_tiny_targets_config_is_accepted_and_trains") {
  const auto dir = testing::fresh_dir("init-tiny");
  const auto target = dir / "target";
  auto made = run_dflow("make-tiny-target --out " + target.string() +
                    " --layers 6 --hidden-size 32 --heads 2 --kv-heads 1 --intermediate-size 64 --vocab 512");
  REQUIRE_MESSAGE(made.exit_code == 0, made.output);
  const auto file = dir / "run.yaml";
  // The machine's sizes for 2 CPU steps on the shared tiny data; the rest is init's.
  const std::string sets = " --set data.train=[" + (testing::assets_dir() / "data").string() +
                           "] --set data.max_length=128 --set data.buckets=[64,128] --set data.tokens_per_batch=512"
                           " --set train.anchors_per_sequence=8 --set model.drafter.sliding_window=32"
                           " --set run.threads=2 --set run.torch_threads=1 --set run.out_dir=" +
                           (dir / "run").string();
  auto init = run_dflow("init " + target.string() + " --device cpu --draft-layers 2 --out " + file.string() + sets);
  INFO(init.output);
  REQUIRE(init.exit_code == 0);
  CHECK(has(init.output, "wrote " + file.string() + "; train with: dflow train " + file.string()));
  const std::string yaml = read_text(file);
  INFO(yaml);
  // What it chose, each with why.
  CHECK(has(yaml, "# dflow runs: the target in-process (target_forward), qwen3 family."));
  CHECK(has(yaml, "the drafter copies its shape: hidden 32, 2 heads (1 key/value), head dim 16"));
  CHECK(has(yaml, "    # config.json names it (dflow_mask_token_id or dflash_config)\n    mask_token_id: 511\n"));
  CHECK(has(yaml, "z-lab's rule for 6 target layers and 2 features"));
  CHECK(has(yaml, "target_layer_ids: [1, 3]"));
  CHECK(has(yaml, "layer_types: [sliding_attention, full_attention]"));
  CHECK(has(yaml, "    # Muon reached tau 8 first"));
  CHECK(has(yaml, "{name: optimizer, type: optimizer_step.muon"));
  CHECK(has(yaml, "# Memory on cpu: "));
  CHECK(has(yaml, "# node 'drafter': drafter memory per anchor at 128 tokens"));

  auto checked = run_dflow("config " + file.string());
  CHECK_MESSAGE(checked.exit_code == 0, checked.output);
  auto trained = run_dflow("train " + file.string() + " --set run.max_steps=2", 300);
  INFO(trained.output);
  CHECK(trained.exit_code == 0);
  CHECK(testing::records_of_kind(dir / "run", "step").size() == 2);
  // The target runs on the drafter's device: the fit at start takes its forward first.
  CHECK(has(trained.output, " for the target's forward of "));

  // An existing --out is not overwritten.
  auto again = run_dflow("init " + target.string() + " --out " + file.string());
  CHECK(again.exit_code == 2);
  CHECK(has(again.output, "--out " + file.string() + " exists"));
}

TEST_CASE("Cli.Init.a_feature_cache_config_fills_and_trains") {
  const auto dir = testing::fresh_dir("init-cache");
  const auto target = dir / "target";
  auto made = run_dflow("make-tiny-target --out " + target.string() +
                        " --layers 6 --hidden-size 32 --heads 2 --kv-heads 1 --intermediate-size 64 --vocab 512");
  REQUIRE_MESSAGE(made.exit_code == 0, made.output);
  const auto file = dir / "cached.yaml";
  auto init = run_dflow("init " + target.string() + " --device cpu --draft-layers 2 --recipe specforge --cache " +
                        (dir / "features").string() + " --out " + file.string() + " --set data.train=[" +
                        (testing::assets_dir() / "data").string() +
                        "] --set data.max_length=128 --set data.buckets=[64,128] --set data.tokens_per_batch=512"
                        " --set train.anchors_per_sequence=8 --set run.threads=2 --set run.torch_threads=1"
                        " --set run.out_dir=" + (dir / "run").string());
  INFO(init.output);
  REQUIRE(init.exit_code == 0);
  CHECK(has(init.output, "fill the cache, then train: dflow cache-features " + file.string() + " && dflow train " +
                             file.string()));
  auto filled = run_dflow("cache-features " + file.string(), 300);
  CHECK_MESSAGE(filled.exit_code == 0, filled.output);
  auto trained = run_dflow("train " + file.string() + " --set run.max_steps=2", 300);
  INFO(trained.output);
  CHECK(trained.exit_code == 0);
  CHECK(has(trained.output, "the target is not run"));
  CHECK(testing::records_of_kind(dir / "run", "step").size() == 2);

  // A target dflow cannot run cannot fill a cache: refused, pointing at engine files.
  const auto other = config_only(dir / "other", qwen3_config(32, "MistralForCausalLM", "mistral"));
  auto refused = run_dflow("init " + other.string() + " --cache " + (dir / "features").string());
  CHECK(refused.exit_code == 2);
  CHECK(has(refused.output, "filling a feature cache runs the target in-process, but MistralForCausalLM is not a target "
                            "dflow runs"));
  CHECK(has(refused.output, "to train from a serving engine's files instead: dflow init " + other.string() +
                            " --engine-files DIR"));
}

TEST_CASE("Cli.Init.feature_layers_follow_z_labs_rule") {
  const auto dir = config_only(testing::fresh_dir("init-layers"), qwen3_config(36));
  auto five = run_dflow("init " + dir.string() + " --memory-gib 80");
  INFO(five.output);
  REQUIRE(five.exit_code == 0);
  CHECK(has(five.output, "target_layer_ids: [1, 9, 17, 25, 33]"));
  CHECK(has(five.output, "z-lab's rule for 36 target layers and 5 features"));
  CHECK(has(five.output, "# Memory on cuda: 80.00 GiB (--memory-gib)"));
  CHECK(has(five.output, "dtype: bfloat16"));
  auto three = run_dflow("init " + dir.string() + " --draft-layers 3 --recipe specforge");
  REQUIRE(three.exit_code == 0);
  CHECK(has(three.output, "target_layer_ids: [1, 17, 33]"));
  CHECK(has(three.output, "{name: optimizer, type: optimizer_step.adamw}"));
  CHECK(!has(three.output, "sliding_attention"));
  // A target too shallow for the rule: its repeat is made distinct, and said.
  const auto shallow = config_only(dir.parent_path() / (dir.filename().string() + "-shallow"), qwen3_config(4));
  auto distinct = run_dflow("init " + shallow.string() + " --draft-layers 3");
  REQUIRE(distinct.exit_code == 0);
  CHECK(has(distinct.output, "whose [1, 1, 1] repeats a layer here, made to rise below the last layer"));
  CHECK(has(distinct.output, "target_layer_ids: [0, 1, 2]\n"));
}

TEST_CASE("Cli.Init.engine_files_give_the_extractions_layer_ids") {
  const auto root = testing::fresh_dir("init-engine");
  const auto dense = config_only(root / "dense", qwen3_config(36));
  auto engine = run_dflow("init " + dense.string() + " --engine-files /shared/hidden_states --out " +
                      (root / "engine.yaml").string());
  REQUIRE_MESSAGE(engine.exit_code == 0, engine.output);
  const std::string yaml = read_text(root / "engine.yaml");
  INFO(yaml);
  CHECK(has(yaml, "type: features.engine"));
  CHECK(has(yaml, "dir: /shared/hidden_states"));
  CHECK(has(yaml, "engine_layer_ids: [2, 10, 18, 26, 34, 36]"));
  CHECK(has(yaml, "start the extraction with `launch_vllm.py --target-layer-ids 2 10 18 26 34`"));
  CHECK(has(yaml, "# dflow runs: head only"));
  auto checked = run_dflow("config " + (root / "engine.yaml").string());
  CHECK_MESSAGE(checked.exit_code == 0, checked.output);

  // An architecture dflow does not run: head only, from engine files, saying why.
  const auto other = config_only(root / "other", qwen3_config(32, "MistralForCausalLM", "mistral"));
  auto unknown = run_dflow("init " + other.string());
  INFO(unknown.output);
  REQUIRE(unknown.exit_code == 0);
  CHECK(has(unknown.output, "MistralForCausalLM is not a target dflow runs"));
  CHECK(has(unknown.output, "engine_layer_ids: [2, 9, 16, 23, 30, 32]"));
  CHECK(has(unknown.output, "point dir at its output (--engine-files DIR)"));

  // A quantization dflow does not load (GPTQ): head only as well.
  std::string gptq = qwen3_config(36);
  gptq.insert(gptq.rfind('}'), R"(, "quantization_config": {"quant_method": "gptq"})");
  auto quantized = run_dflow("init " + config_only(root / "gptq", gptq).string());
  INFO(quantized.output);
  REQUIRE(quantized.exit_code == 0);
  CHECK(has(quantized.output, "Qwen3ForCausalLM is not a target dflow runs (quantization_config "
                              "{\"quant_method\":\"gptq\"} is not supported for qwen3"));
  CHECK(has(quantized.output, "type: features.engine"));
  // FP8 (Qwen3-8B-FP8) loads in-process, dequantized (target/fp8.hpp).
  std::string fp8 = qwen3_config(36);
  fp8.insert(fp8.rfind('}'), R"(, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]})");
  auto in_process = run_dflow("init " + config_only(root / "fp8", fp8).string());
  INFO(in_process.output);
  REQUIRE(in_process.exit_code == 0);
  CHECK(has(in_process.output, "# dflow runs: the target in-process (target_forward), qwen3 family."));
  CHECK_FALSE(has(in_process.output, "is not a target dflow runs"));
}

TEST_CASE("Cli.Init.a_recipe_that_does_not_fit_the_device_recomputes_then_takes_fewer_anchors") {
  const auto dir = config_only(testing::fresh_dir("init-memory"), qwen3_config(36));
  auto roomy = run_dflow("init " + dir.string() + " --memory-gib 80");
  REQUIRE(roomy.exit_code == 0);
  CHECK(!has(roomy.output, "recompute: true"));
  CHECK(has(roomy.output, "anchors_per_sequence: 512\n"));
  // 0.15 GiB holds the drafter's weights, the target's forward and the 6
  // feature batches beside them, but not 512 anchors of its activations.
  auto tight = run_dflow("init " + dir.string() + " --memory-gib 0.15");
  INFO(tight.output);
  REQUIRE(tight.exit_code == 0);
  CHECK(has(tight.output, "    # recompute: true, as without it the largest micro-batch does not fit the memory (the "
                          "fit above)\n"
                          "    - {name: drafter, type: drafter_step, params: {recompute: true}}"));
  CHECK(has(tight.output, "kind: dspark"));
  CHECK(has(tight.output, "  # the most anchors that fit with recomputation\n  anchors_per_sequence: "));
  CHECK(!has(tight.output, "anchors_per_sequence: 512\n"));
  // The target's forward runs beside the drafter: its memory is taken first.
  CHECK(has(tight.output, " available on cuda (after about "));
  CHECK(has(tight.output, " for the target's forward of 4 rows x 3072 tokens, "));
  CHECK(has(tight.output, " feature batches its input edges can hold"));
  CHECK(has(tight.output, " beside it): fits;"));
}

// With kl the target's forward also returns its last layer (the teacher's
// hidden state): one more [tokens, hidden] state than the features, which
// at hidden 4096 and the recipe's 12,288 tokens a batch is 0.09 GiB in
// the recipe's bfloat16 (twice that while the states are concatenated).
TEST_CASE("Cli.Init.a_kl_recipes_target_forward_counts_the_teachers_layer_too") {
  const auto dir = config_only(testing::fresh_dir("init-teacher"), qwen3_4096_config());
  const auto forward_gib = [&](const std::string& loss) { return init_gib(dir, "80", loss, " (after about "); };
  const double ce = forward_gib("ce"), kl = forward_gib("kl");
  CAPTURE(ce);
  CAPTURE(kl);
  CHECK(kl - ce >= 0.08);  // the figures are rounded to 0.01 GiB
  CHECK(kl - ce <= 0.2);
}

// The fit init writes is the one the run makes at start: the step sized
// with the recipe's own loss (kl holds more per chunk of logits than ce, and
// the teacher's states) and the feature batches waiting for the drafter on
// the edges into it.
TEST_CASE("Cli.Init.the_fit_sizes_the_recipes_own_loss_and_the_batches_waiting_for_the_drafter") {
  const auto dir = config_only(testing::fresh_dir("init-loss-fit"), qwen3_4096_config());
  const auto needs_gib = [&](const std::string& loss) { return init_gib(dir, "1000", loss, ") needs about "); };
  for (const std::string loss : {"ce", "kl"})
    CHECK(has(run_dflow("init " + dir.string() + " --memory-gib 1000 --set pipeline.nodes.drafter.params.loss=" + loss)
                  .output,
              " feature batches its input edges can hold"));
  const double ce = needs_gib("ce"), kl = needs_gib("kl");
  CAPTURE(ce);
  CAPTURE(kl);
  // A 2^25-logit chunk's float32 buffers (128 MiB each) and the teacher's
  // [12288, 4096] bfloat16 states (96 MiB), at least.
  CHECK(kl - ce >= 0.2);
}

TEST_CASE("Cli.Init.what_it_cannot_read_is_refused_naming_the_file_and_key") {
  const auto root = testing::fresh_dir("init-refusals");
  fs::create_directories(root / "empty");
  auto empty = run_dflow("init " + (root / "empty").string());
  CHECK(empty.exit_code == 2);
  CHECK(has(empty.output, "dflow: error: " + (root / "empty" / "config.json").string() + " does not exist"));

  const auto sizeless = config_only(root / "sizeless", without(qwen3_config(8), "\"hidden_size\": 64, "));
  auto lacking = run_dflow("init " + sizeless.string());
  CHECK(lacking.exit_code == 2);
  CHECK(has(lacking.output, (sizeless / "config.json").string() + "': lacks 'hidden_size'"));

  std::string nameless = qwen3_config(8);
  nameless.erase(1, nameless.find("\"hidden_size\"") - 1);  // keeps the opening brace
  auto unnamed = run_dflow("init " + config_only(root / "nameless", nameless).string());
  CHECK(unnamed.exit_code == 2);
  CHECK(has(unnamed.output, "names no architecture (neither 'architectures' nor 'model_type')"));

  const std::string maskless = without(qwen3_config(8), ", \"dflow_mask_token_id\": 999");
  const auto no_mask = config_only(root / "maskless", maskless);
  auto unmasked = run_dflow("init " + no_mask.string());
  CHECK(unmasked.exit_code == 2);
  CHECK(has(unmasked.output, (no_mask / "tokenizer.json").string() + " does not exist and"));
  CHECK(has(unmasked.output, "--set model.drafter.mask_token_id=ID"));
  CHECK(run_dflow("init " + no_mask.string() + " --set model.drafter.mask_token_id=999").exit_code == 0);
}

TEST_CASE("Cli.Init.the_mask_token_comes_from_the_tokenizer") {
  const auto root = testing::fresh_dir("init-mask");
  const std::string maskless = without(qwen3_config(8), ", \"dflow_mask_token_id\": 999");
  // A byte-level BPE tokenizer of the 256 bytes and added tokens.
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t c = text::byte_to_code_point(static_cast<unsigned char>(byte));
    std::string utf8 = c < 0x80 ? std::string(1, static_cast<char>(c))
                                : std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    vocab[utf8] = byte;
  }
  auto tokenizer = [&](nlohmann::json added) {
    return nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
                          {"added_tokens", added}}
        .dump();
  };
  const nlohmann::json im_end = {{"id", 256}, {"content", "<|im_end|>"}, {"special", true}};
  // Qwen3's case: the embedding has rows past the tokenizer's tokens.
  const auto spare = config_only(root / "spare", maskless);
  std::ofstream(spare / "tokenizer.json") << tokenizer(nlohmann::json::array({im_end}));
  auto first_free = run_dflow("init " + spare.string());
  INFO(first_free.output);
  REQUIRE(first_free.exit_code == 0);
  CHECK(has(first_free.output, "    # the first embedding row past the tokenizer's 257 tokens (of 1000), which no text "
                               "produces, as SpecForge's <|MASK|>\n    mask_token_id: 257\n"));
  // A tokenizer with its own mask token.
  const auto named = config_only(root / "named", maskless);
  std::ofstream(named / "tokenizer.json")
      << tokenizer(nlohmann::json::array({im_end, {{"id", 257}, {"content", "<|MASK|>"}, {"special", true}}}));
  auto own = run_dflow("init " + named.string());
  REQUIRE_MESSAGE(own.exit_code == 0, own.output);
  CHECK(has(own.output, "    # the tokenizer's <|MASK|> token\n    mask_token_id: 257\n"));
}

TEST_CASE("Cli.Init.a_qwen3_5_moe_wrapper_gets_its_text_models_shape_and_an_mlp_width") {
  // Qwen3.5-35B-A3B's config.json as published: a multimodal wrapper whose
  // text_config (a mixture of experts) has no dense intermediate_size.
  const std::string wrapper = R"({"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
      "tie_word_embeddings": false, "vision_config": {"depth": 27, "hidden_size": 1152},
      "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts": 256,
        "num_experts_per_tok": 8, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
        "eos_token_id": 248044, "full_attention_interval": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}}})";
  const auto root = testing::fresh_dir("init-qwen3_5");
  const auto dir = config_only(root / "qwen3.5-35b-a3b", wrapper);
  auto made = run_dflow("init " + dir.string() + " --memory-gib 80 --set model.drafter.mask_token_id=248319 --out " +
                        (root / "run.yaml").string());
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  const std::string yaml = read_text(root / "run.yaml");
  INFO(yaml);
  CHECK(has(yaml, "Qwen3_5MoeForConditionalGeneration, 40 layers; the drafter copies its shape: hidden 2048, 16 heads "
                  "(2 key/value), head dim 256, MLP (none: experts only), vocabulary 248320"));
  CHECK(has(yaml, "intermediate_size: 6144"));
  CHECK(has(yaml, "no dense intermediate_size (a mixture of experts): 3 x hidden_size"));
  // dflow runs the wrapper's text model in-process (docs/targets.md "Qwen3.5/3.6 in-process").
  CHECK(has(yaml, "# dflow runs: the target in-process"));
  CHECK(has(yaml, "qwen3_5_moe family"));
  auto checked = run_dflow("config " + (root / "run.yaml").string());
  CHECK_MESSAGE(checked.exit_code == 0, checked.output);

  // A text_config without a size the drafter copies: the key and the file, exit 2.
  std::string lacking = wrapper;
  lacking.replace(lacking.find(R"("hidden_size": 2048, )"), std::string(R"("hidden_size": 2048, )").size(), "");
  const auto bad = config_only(root / "lacking", lacking);
  auto refused = run_dflow("init " + bad.string());
  CHECK(refused.exit_code == 2);
  CHECK(has(refused.output, (bad / "config.json").string() + "': lacks 'text_config.hidden_size'"));
}

TEST_CASE("Cli.Init.the_target_beside_the_drafter_counts_its_text_model_not_a_wrappers_vision_tower") {
  REQUIRE_FALSE(testing::python().empty());
  const auto root = testing::fresh_dir("init-wrapper-memory");
  auto written = testing::run_command(testing::python() + " " + testing::source_dir() +
                                          "/tests/target/hf_wrapper_checkpoints.py " + (root / "targets").string(),
                                      600);
  REQUIRE_MESSAGE(written.exit_code == 0, written.output);
  const fs::path dir = root / "targets" / "qwen3_5-moe-untied-single";
  fs::remove(dir / "reference.safetensors");  // the test's reference, not the checkpoint's
  // The text model's bytes as the file's header gives them: all but the vision tower's (model.visual.*).
  const dflow::formats::SafetensorsFile file(dir / "model.safetensors");
  uint64_t text = 0, vision = 0;
  for (const std::string& name : file.names()) {
    const auto& entry = file.entry(name);
    (name.rfind("model.visual.", 0) == 0 ? vision : text) += entry.data_end_bytes - entry.data_begin_bytes;
  }
  REQUIRE(vision > 0);
  auto init = run_dflow("init " + dir.string() + " --device cpu --memory-gib 8 --set model.drafter.mask_token_id=299");
  INFO(init.output);
  REQUIRE(init.exit_code == 0);
  CHECK(has(init.output, "less the target's text model beside the drafter: " + data::format_bytes(text) +
                             " of weights in float32 (its safetensors hold " +
                             data::format_bytes(fs::file_size(dir / "model.safetensors")) +
                             "; what a load never reads, such as a vision tower or mtp layers, is not counted)"));
  // Its forward over the largest micro-batch (every bucket's holds 12288 tokens; the
  // linear layers' per-row states make the 24 rows of 512 the largest) runs beside the drafter's step.
  CHECK(has(init.output, " available on cpu (after about "));
  CHECK(has(init.output, " for the target's forward of 24 rows x 512 tokens, "));
  CHECK(has(init.output, " beside it): fits"));
  // Not beside it: the drafter on its own device has the whole memory.
  auto apart = run_dflow("init " + dir.string() + " --device cpu --memory-gib 8 --set model.drafter.mask_token_id=299"
                         " --set devices.target=[cuda]");
  INFO(apart.output);
  REQUIRE(apart.exit_code == 0);
  CHECK(!has(apart.output, "less the target's text model"));
  CHECK(!has(apart.output, "for the target's forward"));
}
