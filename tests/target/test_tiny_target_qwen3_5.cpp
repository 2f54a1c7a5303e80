// make-tiny-target's Qwen3.5/3.6 wrappers (qwen3_5, qwen3_5_moe): transformers
// (the venv's, independent of dflow) builds the wrapper from config.json and
// finds every text tensor in place, only the vision tower left to its init;
// dflow loads the same checkpoint in-process and every layer's hidden state
// and the logits equal transformers' float32 within float32's rounding
// (tests/target/hf_tiny_wrapper.py; dense and MoE, tied and untied, several
// layer_types); the random weights give peaked, varied continuations; the
// preset has Qwen3.5-35B-A3B's published text shapes; options it cannot
// write are refused, naming them.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::target;
using namespace dflow::target::testing;
namespace fs = std::filesystem;

namespace {

const std::string kLinear = "linear_attention", kFull = "full_attention";

TinyTargetOptions wrapper(const std::string& arch, const fs::path& dir, uint64_t seed) {
  TinyTargetOptions options;
  options.out_dir = dir;
  options.arch = arch;
  options.seed = seed;
  return options;
}

// The four checkpoints, written once per process, each read by transformers
// (transformers.json, reference.safetensors beside it).
const std::map<std::string, TinyTargetOptions>& checkpoints() {
  static ScratchDir scratch("tiny-qwen3_5");
  static const std::map<std::string, TinyTargetOptions> made = [] {
    std::map<std::string, TinyTargetOptions> all;
    // Transformers' default pattern (three linear layers, then a full one), one file.
    all.emplace("dense-untied", wrapper("qwen3_5", scratch.path() / "dense-untied", 1));
    // Full attention first, a partial rotary of half the head, tied, sharded.
    TinyTargetOptions dense_tied = wrapper("qwen3_5", scratch.path() / "dense-tied", 2);
    dense_tied.num_layers = 3;
    dense_tied.layer_types = {kFull, kLinear, kLinear};
    dense_tied.partial_rotary_factor = 0.5;
    dense_tied.tie_word_embeddings = true;
    dense_tied.max_shard_bytes = 64 << 10;
    all.emplace("dense-tied", dense_tied);
    // Two key heads of three value heads each, a conv of 3, bf16 and sharded.
    TinyTargetOptions moe = wrapper("qwen3_5_moe", scratch.path() / "moe-untied", 3);
    moe.linear_num_value_heads = 6;
    moe.linear_conv_kernel = 3;
    moe.shared_expert_intermediate_size = 48;
    moe.dtype = torch::kBFloat16;
    moe.max_shard_bytes = 64 << 10;
    all.emplace("moe-untied", moe);
    // Every second layer full (full_attention_interval 2), tied.
    TinyTargetOptions moe_tied = wrapper("qwen3_5_moe", scratch.path() / "moe-tied", 4);
    moe_tied.num_layers = 3;
    moe_tied.full_attention_interval = 2;
    moe_tied.tie_word_embeddings = true;
    all.emplace("moe-tied", moe_tied);

    std::string dirs;
    for (const auto& [name, options] : all) {
      make_tiny_target(options);
      dirs.append(" ").append(options.out_dir.string());
    }
    if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
    const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                     "/tests/target/hf_tiny_wrapper.py" + dirs,
                                                 600);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return all;
  }();
  return made;
}

}  // namespace

TEST_CASE("Model.TinyTargetQwen3_5.TransformersBuildsTheWrapperAndFindsEveryTextTensor") {
  for (const auto& [name, options] : checkpoints()) {
    CAPTURE(name);
    const auto report = read_json_file(options.out_dir / "transformers.json");
    CHECK(report["class"] == (options.arch == "qwen3_5" ? "Qwen3_5ForConditionalGeneration"
                                                        : "Qwen3_5MoeForConditionalGeneration"));
    CHECK(report["unexpected"].empty());
    CHECK(report["mismatched"].empty());
    INFO(report["missing"].dump());
    CHECK_FALSE(report["missing"].empty());  // the vision tower, which is not written
    for (const auto& key : report["missing"]) CHECK(key.get<std::string>().rfind("model.visual.", 0) == 0);

    const auto config = read_json_file(options.out_dir / "config.json");
    CHECK(config["text_config"]["model_type"] == options.arch + "_text");
    CHECK(config.contains("vision_config"));
    const dflow::formats::TensorMap tensors = dflow::formats::load_checkpoint_dir(options.out_dir);
    CHECK(tensors.count("lm_head.weight") == (options.tie_word_embeddings ? 0u : 1u));
    for (const auto& [key, tensor] : tensors)
      CHECK((key == "lm_head.weight" || key.rfind("model.language_model.", 0) == 0));
  }
  const auto& moe = checkpoints().at("moe-untied");
  const auto text = read_json_file(moe.out_dir / "config.json")["text_config"];
  CHECK(text["layer_types"] == nlohmann::json({kLinear, kLinear, kLinear, kFull}));
  const dflow::formats::TensorMap tensors = dflow::formats::load_checkpoint_dir(moe.out_dir);
  CHECK(tensors.at("model.language_model.layers.0.linear_attn.in_proj_qkv.weight").sizes() ==
        torch::IntArrayRef({2 * 2 * 16 + 6 * 16, 64}));
  CHECK(tensors.at("model.language_model.layers.0.linear_attn.conv1d.weight").sizes() ==
        torch::IntArrayRef({2 * 2 * 16 + 6 * 16, 1, 3}));
  CHECK(tensors.at("model.language_model.layers.3.self_attn.q_proj.weight").sizes() ==
        torch::IntArrayRef({2 * 4 * 16, 64}));  // each head's query and its output gate
  CHECK(tensors.at("model.language_model.layers.3.mlp.shared_expert.down_proj.weight").sizes() ==
        torch::IntArrayRef({64, 48}));
  CHECK((tensors.at("model.language_model.layers.3.mlp.experts.7.up_proj.weight").scalar_type() == torch::kBFloat16));
}

TEST_CASE("Model.TinyTargetQwen3_5.EveryLayerInDflowEqualsTransformersFloat32") {
  // dflow's float32 forward against transformers' float32, within float32's
  // rounding as transformers' float64 measures it (the 150-token row spans
  // three of the delta rule's chunks).
  torch::set_num_threads(1);
  for (const auto& [name, options] : checkpoints()) {
    CAPTURE(name);
    const TargetModel target = TargetModel::load(options.out_dir);
    const HFConfig& config = target.config();
    CHECK(config.family == (options.arch == "qwen3_5" ? ModelFamily::Qwen3_5 : ModelFamily::Qwen3_5Moe));
    CHECK(config.tie_word_embeddings == options.tie_word_embeddings);
    const dflow::formats::SafetensorsFile reference(options.out_dir / "reference.safetensors");
    const auto rows = id_lists(read_json_file(options.out_dir / "transformers.json")["rows"]);
    REQUIRE(rows.size() == 3);
    for (size_t r = 0; r < rows.size(); ++r) {
      CAPTURE(r);
      const TargetOutput out = target.forward(ids_tensor(rows[r]), every_layer(target), /*want_logits=*/true);
      const std::string row = ".row" + std::to_string(r) + ".";
      for (int64_t layer = 0; layer < target.num_layers(); ++layer) {
        CAPTURE(layer);
        const std::string key = row + "hidden_states." + std::to_string(layer + 1);
        const torch::Tensor expected = reference.tensor("float32" + key);
        REQUIRE(expected.abs().max().item<double>() > 0.5);  // O(1) activations, not a vacuous comparison
        check_within_float32_rounding(out.hidden_states[static_cast<size_t>(layer)][0], expected,
                                      reference.tensor("float64" + key));
      }
      check_within_float32_rounding(out.logits[0], reference.tensor("float32" + row + "logits"),
                                    reference.tensor("float64" + row + "logits"));
    }
  }
}

TEST_CASE("Model.TinyTargetQwen3_5.RandomContinuationsArePeakedButVaried") {
  // As the random Qwen3 aims for: greedy decoding wanders through many
  // tokens instead of repeating a few, and the next-token distribution is
  // confident without being one-hot.
  torch::set_num_threads(1);
  for (const std::string name : {"dense-untied", "moe-untied"}) {
    CAPTURE(name);
    const TargetModel target = TargetModel::load(checkpoints().at(name).out_dir);
    const std::vector<int64_t> prompt = {3, 17, 42, 99, 5};
    const std::vector<int64_t> greedy = target.generate(prompt, 48, 0.0, 0, {});
    const std::set<int64_t> distinct(greedy.begin(), greedy.end());
    CAPTURE(distinct.size());
    CHECK(distinct.size() >= 16);
    std::vector<int64_t> sequence = prompt;
    sequence.insert(sequence.end(), greedy.begin(), greedy.end());
    const torch::Tensor logits = target.forward(ids_tensor(sequence), {}, true).logits[0];
    const double top1 = torch::softmax(logits, -1).amax(-1).mean().item<double>();
    CAPTURE(top1);
    CHECK(top1 > 0.2);
    CHECK(top1 < 0.95);
  }
}

TEST_CASE("Model.TinyTargetQwen3_5.PresetHasThePublishedTextShapes") {
  const auto preset = preset_target_options("qwen3.5-35b-a3b");
  CHECK(preset.arch == "qwen3_5_moe");
  CHECK((preset.dtype == torch::kBFloat16));
  CHECK(preset.max_shard_bytes == int64_t{512} << 20);
  const HFConfig c = tiny_target_config(preset);
  CHECK(c.family == ModelFamily::Qwen3_5Moe);
  CHECK(c.num_hidden_layers == 40);
  CHECK(c.hidden_size == 2048);
  CHECK(c.num_attention_heads == 16);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 256);
  CHECK(c.rotary_dim == 64);  // a quarter of the head
  CHECK(c.rope_theta == 1e7);
  CHECK(c.max_position_embeddings == 262144);
  CHECK(c.vocab_size == 248320);
  CHECK(c.eos_token_ids == std::vector<int64_t>{248044});
  CHECK(c.mask_token_id == 248319);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.linear.num_key_heads == 16);
  CHECK(c.linear.num_value_heads == 32);
  CHECK(c.linear.key_head_dim == 128);
  CHECK(c.linear.value_head_dim == 128);
  CHECK(c.linear.conv_kernel == 4);
  CHECK(c.moe.num_experts == 256);
  CHECK(c.moe.experts_per_token == 8);
  CHECK(c.moe.expert_intermediate_size == 512);
  CHECK(c.moe.shared_expert_intermediate_size == 512);
  CHECK(c.moe.sparse_layers == std::vector<bool>(40, true));
  REQUIRE(c.layer_kinds.size() == 40);
  for (size_t i = 0; i < c.layer_kinds.size(); ++i) {
    CAPTURE(i);
    CHECK((c.layer_kinds[i] == ((i + 1) % 4 == 0 ? LayerKind::full_attention : LayerKind::linear_attention)));
  }
  // --preset-layers 4: the first four, both kinds.
  TinyTargetOptions shallow = preset;
  shallow.num_layers = 4;
  CHECK((tiny_target_config(shallow).layer_kinds ==
         std::vector<LayerKind>{LayerKind::linear_attention, LayerKind::linear_attention, LayerKind::linear_attention,
                                LayerKind::full_attention}));
}

TEST_CASE("Model.TinyTargetQwen3_5.OptionsItCannotWriteAreRefused") {
  ScratchDir scratch("tiny-qwen3_5-refused");
  TinyTargetOptions o = wrapper("qwen3_5", scratch.path(), 0);
  const auto refused = [&](const char* words) {
    CHECK_THROWS_WITH_AS(make_tiny_target(o), doctest::Contains(words), std::invalid_argument);
    CHECK_FALSE(fs::exists(scratch.path() / "config.json"));
  };
  SUBCASE("the echo pattern") {
    o.pattern = "echo";
    refused("qwen3_5 has Gated DeltaNet layers");
  }
  SUBCASE("layer_types of another length") {
    o.layer_types = {kLinear, kFull};
    refused("layer_types lists 2 kinds for 4 layers");
  }
  SUBCASE("an unknown layer kind") {
    o.layer_types = {kLinear, kLinear, "sliding_attention", kFull};
    refused("layer_types[2] is 'sliding_attention'");
  }
  SUBCASE("layer_types for another architecture") {
    o.arch = "qwen3";
    o.layer_types = {kFull, kFull, kFull, kFull};
    refused("layer_types are qwen3_5's and qwen3_5_moe's");
  }
  SUBCASE("value heads not a multiple of key heads") {
    o.linear_num_value_heads = 3;
    refused("linear value heads 3 are not a multiple of linear key heads 2");
  }
  SUBCASE("a conv kernel of zero") {
    o.linear_conv_kernel = 0;
    refused("conv kernel 0) must all be >= 1");
  }
  SUBCASE("a rotary share of no even dims") {
    o.partial_rotary_factor = 0.1;  // int(16 x 0.1) = 1
    refused("partial_rotary_factor 0.100000 of head_dim 16 rotates 1 dims");
  }
  SUBCASE("qwen3_moe's dense layers") {
    o.arch = "qwen3_5_moe";
    o.mlp_only_layers = {1};
    refused("qwen3_5_moe routes every layer");
  }
  SUBCASE("an interval of zero") {
    o.full_attention_interval = 0;
    refused("full_attention_interval must be >= 1");
  }
}
