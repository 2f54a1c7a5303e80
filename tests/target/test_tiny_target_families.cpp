// make-tiny-target's mixture-of-experts architectures, read by transformers
// (the venv's, independent of dflow's loader): every tensor in the place and
// shape Hugging Face's Qwen3MoeForCausalLM and GptOssForCausalLM expect, and
// the echo pattern's greedy continuation, computed by transformers' own
// forward, is token[t] = perm(token[t - lag]) for one permutation, and
// dflow's forward continues it the same way.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/safetensors.hpp"
#include "target/echo_check.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using dflow::target::testing::EchoPermutation;
using dflow::target::testing::ScratchDir;

namespace {

TinyTargetOptions small_moe(const std::string& arch, const std::filesystem::path& dir) {
  TinyTargetOptions options;
  options.out_dir = dir;
  options.arch = arch;
  options.num_layers = 3;
  options.seed = 11;
  return options;
}

// transformers' report on each directory (hf_tiny_target.py), with greedy
// continuations of `prompts` when new_tokens > 0.
nlohmann::json transformers_report(const std::vector<std::filesystem::path>& dirs,
                                   const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens,
                                   const std::filesystem::path& scratch) {
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  std::ostringstream rows;
  for (size_t r = 0; r < prompts.size(); ++r) {
    for (size_t i = 0; i < prompts[r].size(); ++i) rows << (i ? "," : "") << prompts[r][i];
    rows << ";";
  }
  const auto out = scratch / "report.json";
  std::string command = ::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                        "/tests/target/hf_tiny_target.py " + out.string() + " '" + rows.str() + "' " +
                        std::to_string(new_tokens);
  for (const auto& dir : dirs) command.append(" ").append(dir.string());
  const auto o = ::dflow::testing::run_command(command, 300);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  return read_json_file(out);
}

void check_every_key_in_place(const nlohmann::json& report, const std::string& expected_class) {
  CHECK(report["class"] == expected_class);
  CHECK(report["missing"].empty());
  CHECK(report["unexpected"].empty());
  CHECK(report["mismatched"].empty());
  INFO(report.dump());
}

}  // namespace

TEST_CASE("Model.TinyTarget.MoeCheckpointsLoadInTransformersWithNoMissingOrUnexpectedKeys") {
  ScratchDir scratch("tiny-moe-keys");
  // Qwen3-MoE with a dense layer (mlp_only_layers) between sparse ones, bf16
  // and sharded (the index); gpt-oss single-file float32 and tied.
  TinyTargetOptions qwen = small_moe("qwen3_moe", scratch.path() / "qwen3_moe");
  qwen.mlp_only_layers = {1};
  qwen.dtype = torch::kBFloat16;
  qwen.max_shard_bytes = 64 << 10;
  const HFConfig qwen_config = make_tiny_target(qwen);
  CHECK((qwen_config.family == ModelFamily::Qwen3Moe));
  CHECK(qwen_config.moe.num_experts == 8);
  CHECK(qwen_config.moe.sparse_layers == std::vector<bool>{true, false, true});
  CHECK(std::filesystem::exists(scratch.path() / "qwen3_moe" / "model.safetensors.index.json"));
  const auto index = read_json_file(scratch.path() / "qwen3_moe" / "model.safetensors.index.json");
  CHECK(index["weight_map"].contains("model.layers.0.mlp.experts.7.down_proj.weight"));
  CHECK(index["weight_map"].contains("model.layers.1.mlp.gate_proj.weight"));  // the dense layer
  CHECK_FALSE(index["weight_map"].contains("model.layers.1.mlp.gate.weight"));

  TinyTargetOptions oss = small_moe("gpt_oss", scratch.path() / "gpt_oss");
  oss.tie_word_embeddings = true;
  make_tiny_target(oss);
  const dflow::formats::SafetensorsFile oss_file(scratch.path() / "gpt_oss" / "model.safetensors");
  CHECK(oss_file.entry("model.layers.0.mlp.experts.gate_up_proj").shape == std::vector<int64_t>{8, 64, 256});
  CHECK(oss_file.entry("model.layers.0.mlp.experts.down_proj").shape == std::vector<int64_t>{8, 128, 64});
  CHECK(oss_file.entry("model.layers.2.self_attn.sinks").shape == std::vector<int64_t>{4});
  const auto oss_json = read_json_file(scratch.path() / "gpt_oss" / "config.json");
  CHECK(oss_json["layer_types"] == nlohmann::json({"sliding_attention", "full_attention", "sliding_attention"}));
  CHECK(oss_json["rope_scaling"]["rope_type"] == "yarn");

  const auto report = transformers_report({scratch.path() / "qwen3_moe", scratch.path() / "gpt_oss"}, {}, 0, scratch.path());
  check_every_key_in_place(report[(scratch.path() / "qwen3_moe").string()], "Qwen3MoeForCausalLM");
  check_every_key_in_place(report[(scratch.path() / "gpt_oss").string()], "GptOssForCausalLM");
}

TEST_CASE("Model.TinyTarget.MoeEchoTargetsContinueThroughAPermutationInTransformers") {
  ScratchDir scratch("tiny-moe-echo");
  std::vector<std::filesystem::path> dirs;
  int64_t lag = 0, text_vocab = 0;
  for (const std::string arch : {"qwen3_moe", "gpt_oss"}) {
    TinyTargetOptions options = small_moe(arch, scratch.path() / arch);
    options.pattern = "echo";
    make_tiny_target(options);
    dirs.push_back(options.out_dir);
    lag = options.echo_lag;
    text_vocab = options.vocab_size - 2;
  }
  // Prompts longer than gpt-oss's sliding window (32) too: the echo head
  // sits in a sliding layer and needs only lag tokens of it.
  torch::manual_seed(5);
  std::vector<std::vector<int64_t>> prompts;
  for (const int64_t length : {lag, lag + 5, int64_t{40}}) {
    const torch::Tensor ids = torch::randint(0, text_vocab, {length}, torch::kInt64);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  }
  const int64_t new_tokens = 40;
  const auto report = transformers_report(dirs, prompts, new_tokens, scratch.path());
  for (const auto& dir : dirs) {
    CAPTURE(dir.string());
    const auto& greedy = report[dir.string()]["greedy"];
    REQUIRE(greedy.size() == prompts.size());
    EchoPermutation perm(lag, text_vocab);
    int64_t checked = 0;
    for (size_t p = 0; p < prompts.size(); ++p) checked += perm.follow(prompts[p], greedy[p].get<std::vector<int64_t>>());
    CHECK(checked == static_cast<int64_t>(prompts.size()) * new_tokens);
    perm.check_is_a_permutation();
    // dflow's own forward of the same checkpoint continues every prompt as transformers does.
    const TargetModel target = TargetModel::load(dir);
    for (size_t p = 0; p < prompts.size(); ++p) {
      CAPTURE(p);
      CHECK(nlohmann::json(target.generate(prompts[p], new_tokens, 0.0, 0, {})) == greedy[p]);
    }
  }
}

TEST_CASE("Model.TinyTarget.Mxfp4ExpertsDequantizeInTransformersToTheSameDraw") {
  // The same options and seed with and without --mxfp4 draw the same
  // weights: transformers' own dequantization of the blocks and scales must
  // give the dense checkpoint's tensors in their layout, within FP4's
  // rounding (a 32-value block scaled to 6: about 12% of a Gaussian's norm;
  // a transposed or nibble-swapped layout gives over 100%).
  ScratchDir scratch("tiny-mxfp4");
  TinyTargetOptions dense = small_moe("gpt_oss", scratch.path() / "dense");
  make_tiny_target(dense);
  TinyTargetOptions quantized = dense;
  quantized.out_dir = scratch.path() / "mxfp4";
  quantized.mxfp4 = true;
  make_tiny_target(quantized);
  const auto config = read_json_file(quantized.out_dir / "config.json");
  CHECK(config["quantization_config"]["quant_method"] == "mxfp4");
  const dflow::formats::SafetensorsFile file(quantized.out_dir / "model.safetensors");
  CHECK(file.entry("model.layers.0.mlp.experts.gate_up_proj_blocks").shape == std::vector<int64_t>{8, 256, 2, 16});
  CHECK(file.entry("model.layers.0.mlp.experts.gate_up_proj_scales").shape == std::vector<int64_t>{8, 256, 2});
  CHECK(file.entry("model.layers.0.mlp.experts.down_proj_blocks").dtype_name == "U8");

  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto out = scratch.path() / "mxfp4.json";
  const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                   "/tests/target/hf_mxfp4_check.py " + quantized.out_dir.string() + " " +
                                                   dense.out_dir.string() + " " + out.string(),
                                               120);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const auto report = read_json_file(out);
  CHECK(report.size() == 6);  // gate_up_proj and down_proj of 3 layers
  for (const auto& [name, entry] : report.items()) {
    CAPTURE(name);
    CHECK(entry["shape"] == entry["dense_shape"]);
    CHECK(entry["relative_error"].get<double>() < 0.15);
  }
}

TEST_CASE("Model.TinyTarget.Mxfp4EchoTargetContinuesAsItsDenseTwinInDflow") {
  // dflow's loader dequantizes the MXFP4 experts; the echo survives their
  // rounding (the experts' output is small), so greedy decoding equals the
  // dense checkpoint's of the same seed, token for token.
  ScratchDir scratch("tiny-mxfp4-echo");
  TinyTargetOptions dense = small_moe("gpt_oss", scratch.path() / "dense");
  dense.pattern = "echo";
  make_tiny_target(dense);
  TinyTargetOptions quantized = dense;
  quantized.out_dir = scratch.path() / "mxfp4";
  quantized.mxfp4 = true;
  const HFConfig config = make_tiny_target(quantized);
  CHECK(config.moe.mxfp4);
  const TargetModel dense_target = TargetModel::load(dense.out_dir), quantized_target = TargetModel::load(quantized.out_dir);
  torch::manual_seed(8);
  for (int p = 0; p < 3; ++p) {
    const torch::Tensor ids = torch::randint(0, dense.vocab_size - 2, {dense.echo_lag + 3 * p}, torch::kInt64);
    const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    const auto expected = dense_target.generate(prompt, 40, 0.0, 0, {});
    CHECK(quantized_target.generate(prompt, 40, 0.0, 0, {}) == expected);
  }
}

TEST_CASE("Model.TinyTarget.MoePresetsHaveThePublishedShapes") {
  const auto a3b = preset_target_options("qwen3-30b-a3b");
  CHECK(a3b.arch == "qwen3_moe");
  const HFConfig a3b_config = tiny_target_config(a3b);
  CHECK(a3b_config.num_hidden_layers == 48);
  CHECK(a3b_config.hidden_size == 2048);
  CHECK(a3b_config.num_attention_heads == 32);
  CHECK(a3b_config.num_key_value_heads == 4);
  CHECK(a3b_config.head_dim == 128);
  CHECK(a3b_config.vocab_size == 151936);
  CHECK(a3b_config.max_position_embeddings == 40960);
  CHECK(a3b_config.rope_theta == 1e6);
  CHECK_FALSE(a3b_config.tie_word_embeddings);
  CHECK(a3b_config.moe.num_experts == 128);
  CHECK(a3b_config.moe.experts_per_token == 8);
  CHECK(a3b_config.moe.expert_intermediate_size == 768);
  CHECK(a3b_config.moe.norm_topk_prob);
  CHECK(a3b_config.moe.sparse_layers == std::vector<bool>(48, true));
  CHECK((a3b.dtype == torch::kBFloat16));
  CHECK(a3b.max_shard_bytes == int64_t{512} << 20);

  const auto oss = preset_target_options("gpt-oss-20b");
  CHECK(oss.arch == "gpt_oss");
  CHECK(oss.num_layers == 24);
  CHECK(oss.hidden_size == 2880);
  CHECK(oss.num_heads == 64);
  CHECK(oss.num_kv_heads == 8);
  CHECK(oss.head_dim == 64);
  CHECK(oss.num_experts == 32);
  CHECK(oss.experts_per_token == 4);
  CHECK(oss.intermediate_size == 2880);
  CHECK(oss.vocab_size == 201088);
  CHECK(oss.sliding_window == 128);
}
