// dflow's in-process Qwen3.5/3.6 text models (Gated DeltaNet and gated
// full-attention layers, zero-centred norms, dense MLP or routed experts with
// a gated shared expert) against transformers' torch fallback, on tiny random
// multimodal-wrapper checkpoints it wrote (tests/target/hf_qwen3_5_reference.py):
// every layer's hidden state in float32 and bfloat16, greedy decoding against
// transformers' float64 argmax, the incremental states (and their rollback
// after a rejected draft) and packed rows against dflow's full forward, and
// the refusals of configs and checkpoints
// that do not fit layer_types.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.hpp"
#include "target/hf_config.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"
#include "target/target.hpp"

using namespace dflow::target;
using namespace dflow::target::testing;
namespace fs = std::filesystem;

namespace {

const char* const kCheckpoints[] = {"qwen3_5-dense-untied", "qwen3_5-dense-tied-full-first", "qwen3_5-moe-untied",
                                    "qwen3_5-moe-tied-alternating"};

const fs::path& qwen3_5_checkpoints() {
  static ScratchDir dir("hf-qwen3_5");
  static const bool written = (write_with_python("hf_qwen3_5_reference.py", dir.path()), true);
  (void)written;
  return dir.path();
}

// `source`'s tensors (with `edit` applied) and its config.json (with
// `edit_config` applied) written to `dir`.
void write_edited(const fs::path& dir, const fs::path& source, const std::function<void(nlohmann::json&)>& edit_config,
                  const std::function<void(dflow::formats::TensorMap&)>& edit = {}) {
  nlohmann::json config = read_json_file(source / "config.json");
  edit_config(config);
  std::ofstream(dir / "config.json") << config.dump();
  dflow::formats::TensorMap tensors = dflow::formats::load_checkpoint_dir(source);
  if (edit) edit(tensors);
  dflow::formats::write_safetensors(dir / "model.safetensors", {tensors.begin(), tensors.end()}, {{"format", "pt"}});
}

}  // namespace

TEST_CASE("Model.Qwen3_5Reference.LoadsTheWrappersTextModelAsLayerTypesSay") {
  const TargetModel dense = TargetModel::load(qwen3_5_checkpoints() / "qwen3_5-dense-untied");
  const HFConfig& d = dense.config();
  CHECK(d.family == ModelFamily::Qwen3_5);
  CHECK(d.norm == NormStyle::OnePlusWeight);
  CHECK((d.layer_kinds == std::vector<LayerKind>{LayerKind::linear_attention, LayerKind::linear_attention,
                                                 LayerKind::linear_attention, LayerKind::full_attention}));
  CHECK(d.rotary_dim == 4);  // head_dim 16 * transformers' default partial_rotary_factor 0.25
  CHECK(d.attention_output_gate);
  CHECK(d.linear.conv_dim() == 2 * 2 * 16 + 4 * 16);
  CHECK_FALSE(d.tie_word_embeddings);

  const TargetModel moe = TargetModel::load(qwen3_5_checkpoints() / "qwen3_5-moe-tied-alternating");
  const HFConfig& m = moe.config();
  CHECK(m.family == ModelFamily::Qwen3_5Moe);
  CHECK(m.intermediate_size == 0);
  CHECK(m.moe.sparse_layers == std::vector<bool>{true, true, true});
  CHECK(m.moe.shared_expert_intermediate_size == 48);
  CHECK(m.tie_word_embeddings);
  CHECK(moe.lm_head_weight().data_ptr() == moe.embedding_weight().data_ptr());
  // The head-only reader agrees: the wrapper now runs in-process.
  const HeadConfig head = load_head_config(qwen3_5_checkpoints() / "qwen3_5-moe-tied-alternating");
  CHECK(head.runnable());
  CHECK(head.wrapper());
  CHECK(head.text_model_type == "qwen3_5_moe_text");
}

TEST_CASE("Model.Qwen3_5Reference.HiddenStatesOfEveryLayerEqualTransformersFloat32") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_float32_states_equal_reference(qwen3_5_checkpoints() / name);
  }
}

TEST_CASE("Model.Qwen3_5Reference.HiddenStatesOfEveryLayerWithinBfloat16ToleranceOfTransformers") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_bfloat16_states_near_transformers(qwen3_5_checkpoints() / name);
  }
}

TEST_CASE("Model.Qwen3_5Reference.GreedyDecodingEqualsTransformersFloat64Argmax") {
  // Decoding carries each linear layer's conv and recurrent state from one
  // token to the next (and the full layers' KV cache).
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_greedy_equals_float64_argmax(qwen3_5_checkpoints() / name);
  }
}

TEST_CASE("Model.Qwen3_5Reference.CachedStatesAndPackedDocumentsEqualTheFullForward") {
  // Packed rows: the second document's conv and recurrent states start from
  // zeros, as if it were alone in a row (the 150-token row spans three of the
  // delta rule's chunks, and a document boundary falls inside a chunk).
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    const fs::path dir = qwen3_5_checkpoints() / name;
    const TargetModel target = TargetModel::load(dir), target64 = TargetModel::load(dir, torch::kCPU, torch::kFloat64);
    const auto rows = id_lists(reference_json(dir)["rows"]);
    check_cache_and_packing_equal_full_forward(target, target64, every_layer(target), ids_tensor(rows[0]),
                                               ids_tensor(rows[2]), {5});
  }
}

TEST_CASE("Model.Qwen3_5Reference.ARejectedDraftLeavesTheStatesOfTheAcceptedPrefix") {
  // As speculative decoding verifies a block and keeps its accepted prefix:
  // after each truncation the next call's states and logits are those of a
  // full forward over the accepted tokens (within float32's rounding of them).
  torch::set_num_threads(1);
  for (const std::string name : {"qwen3_5-dense-untied", "qwen3_5-moe-tied-alternating"}) {
    CAPTURE(name);
    const fs::path dir = qwen3_5_checkpoints() / name;
    const TargetModel target = TargetModel::load(dir), target64 = TargetModel::load(dir, torch::kCPU, torch::kFloat64);
    const auto layers = every_layer(target);
    const torch::Tensor row = ids_tensor(id_lists(reference_json(dir)["rows"])[2]).narrow(1, 0, 30);
    const TargetOutput full = target.forward(row, layers, true), full64 = target64.forward(row, layers, true);
    KVCache cache = target.new_cache(1, 40);
    // Three linear layers' conv [1, 128, 3] and recurrent [1, 4, 16, 16] states, float32, each kept twice.
    if (name == "qwen3_5-dense-untied") CHECK(cache.linear_state_bytes() == 2 * 3 * (128 * 3 + 4 * 16 * 16) * 4);
    const auto verify = [&](int64_t start, int64_t count) {
      CAPTURE(start);
      REQUIRE(cache.length() == start);
      const TargetOutput out = target.forward_cached(cache, row.narrow(1, start, count), layers, true);
      for (size_t l = 0; l < layers.size(); ++l) {
        CAPTURE(l);
        check_within_float32_rounding(out.hidden_states[l], full.hidden_states[l].narrow(1, start, count),
                                      full64.hidden_states[l].narrow(1, start, count));
      }
      check_within_float32_rounding(out.logits, full.logits.narrow(1, start, count),
                                    full64.logits.narrow(1, start, count));
    };
    verify(0, 20);
    verify(20, 5);
    cache.truncate(22);  // two of the block's tokens accepted: fed again before the next block's
    verify(22, 5);
    cache.truncate(22);  // none accepted
    verify(22, 4);
    cache.truncate(26);  // all accepted
    verify(26, 4);
    CHECK_THROWS_WITH_AS(cache.truncate(20),
                         doctest::Contains("keep their recurrent state from before the last forward_cached call only"),
                         std::invalid_argument);
  }
}

TEST_CASE("Model.Qwen3_5Reference.ConfigsAndCheckpointsThatDoNotFitLayerTypesAreRefused") {
  const fs::path source = qwen3_5_checkpoints() / "qwen3_5-dense-untied";
  ScratchDir dir("qwen3_5-refused");
  const auto text = [](nlohmann::json& config) -> nlohmann::json& { return config["text_config"]; };

  SUBCASE("an unknown layer_types entry") {
    write_edited(dir.path(), source, [&](nlohmann::json& c) { text(c)["layer_types"][1] = "sliding_attention"; });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("layer_types[1] is 'sliding_attention', which dflow does not run"),
                         std::runtime_error);
  }
  SUBCASE("layer_types of another length") {
    write_edited(dir.path(), source, [&](nlohmann::json& c) { text(c)["layer_types"].erase(0); });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("layer_types must list one entry per layer (num_hidden_layers 4)"),
                         std::runtime_error);
  }
  SUBCASE("value heads not a multiple of key heads") {
    write_edited(dir.path(), source, [&](nlohmann::json& c) { text(c)["linear_num_value_heads"] = 3; });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"),
                         std::runtime_error);
  }
  SUBCASE("a conv kernel of zero") {
    write_edited(dir.path(), source, [&](nlohmann::json& c) { text(c)["linear_conv_kernel_dim"] = 0; });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("'linear_conv_kernel_dim' must be a positive integer"), std::runtime_error);
  }
  SUBCASE("a partial rotary factor of no even dims") {
    write_edited(dir.path(), source,
                 [&](nlohmann::json& c) { text(c)["rope_parameters"]["partial_rotary_factor"] = 0.1; });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("partial_rotary_factor"),
                         std::runtime_error);
  }
  SUBCASE("layer_types that do not match the tensors") {
    write_edited(dir.path(), source, [&](nlohmann::json& c) {
      text(c)["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "linear_attention"};
    });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("layer 0 is 'full_attention' in config.json's layer_types, but the "
                                           "checkpoint holds 'model.language_model.layers.0.linear_attn.in_proj_qkv.weight'"),
                         std::runtime_error);
  }
  SUBCASE("a linear layer's tensor missing") {
    write_edited(
        dir.path(), source, [](nlohmann::json&) {},
        [](dflow::formats::TensorMap& tensors) { tensors.erase("model.language_model.layers.2.linear_attn.A_log"); });
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("lacks tensor 'model.language_model.layers.2.linear_attn.A_log'"),
                         std::runtime_error);
  }
}
