// dflow's gpt-oss target against transformers (independent Python code in the
// venv) on small random checkpoints it wrote (tests/target/hf_gpt_oss_reference.py):
// sliding and full layers with sinks, YaRN, biased attention and experts,
// the clamped SwiGLU, and MXFP4 experts as the published checkpoints store
// them. Every layer's hidden state (the drafter's features; the last after
// the final norm) in float32 and bfloat16, greedy decoding against
// transformers' float64 argmax past the sliding window, and dflow's other
// paths to the same features (the KV cache, packed documents) against its
// full forward.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target/documents.hpp"
#include "target/hf_config.hpp"
#include "target/mxfp4.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using namespace dflow::target::testing;
namespace fs = std::filesystem;

namespace {

const char* const kCheckpoints[] = {"gpt-oss-bf16", "gpt-oss-mxfp4"};

// The checkpoints and their references, written once per test process.
const fs::path& gpt_oss_checkpoints() {
  static ScratchDir dir("hf-gpt-oss");
  static const bool written = (dflow::target::testing::write_with_python("hf_gpt_oss_reference.py", dir.path()), true);
  (void)written;
  return dir.path();
}

}  // namespace

TEST_CASE("Model.GptOssReference.ConfigAsTransformersWroteIt") {
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    const HFConfig c = TargetModel::load(gpt_oss_checkpoints() / name).config();
    CHECK(c.family == ModelFamily::GptOss);
    CHECK(c.sliding_window_per_layer == std::vector<int64_t>{4, 0, 4, 0});
    CHECK(c.attention_sinks);
    CHECK(c.attention_bias);
    CHECK(c.attention_output_bias);
    CHECK_FALSE(c.qk_norm);
    CHECK(c.rope_scaling.type == "yarn");
    CHECK(c.rope_scaling.factor == 32.0);
    CHECK(c.rope_scaling.original_max_position_embeddings == 4096);
    CHECK_FALSE(c.rope_scaling.truncate);
    CHECK(c.rope_theta == 150000.0);
    CHECK(c.moe.num_experts == 4);
    CHECK(c.moe.experts_per_token == 2);
    CHECK(c.moe.expert_intermediate_size == 32);
    CHECK(c.moe.swiglu_limit == 7.0);
    CHECK(c.moe.sparse_layers == std::vector<bool>(4, true));
    CHECK(c.moe.mxfp4 == (std::string(name) == "gpt-oss-mxfp4"));
  }
  // The fixture's experts do reach the SwiGLU's limit, in every layer.
  for (const double share : reference_json(gpt_oss_checkpoints() / kCheckpoints[0])["clamped_shares"]) {
    CHECK(share > 0.02);
  }
}

TEST_CASE("Model.GptOssReference.Mxfp4DequantizesAsTransformers") {
  const dflow::formats::SafetensorsFile reference(gpt_oss_checkpoints() / "mxfp4_dequantize.safetensors");
  const torch::Tensor blocks = reference.tensor("blocks"), scales = reference.tensor("scales");  // [3, 5, 4, 16], [3, 5, 4]
  for (const auto& [key, dtype] : {std::pair{"float32", torch::kFloat32}, std::pair{"bfloat16", torch::kBFloat16}}) {
    CAPTURE(key);
    const torch::Tensor got = mxfp4_dequantize(blocks, scales, torch::kCPU, dtype);  // [3, 5, 128]
    CHECK(got.sizes() == torch::IntArrayRef({3, 5, 128}));
    CHECK((got.scalar_type() == dtype));
    // transformers hands the last two axes transposed, as its parameters lie.
    CHECK(torch::equal(got, reference.tensor(key).transpose(1, 2)));
  }
  CHECK_THROWS_WITH_AS(mxfp4_dequantize(blocks.to(torch::kInt32), scales, torch::kCPU, torch::kFloat32),
                       doctest::Contains("uint8"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(mxfp4_dequantize(blocks, scales.narrow(2, 0, 3), torch::kCPU, torch::kFloat32),
                       doctest::Contains("are not [..., G, 16] and [..., G]"), std::invalid_argument);
}

TEST_CASE("Model.GptOssReference.HiddenStatesOfEveryLayerEqualTransformersFloat32") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_float32_states_equal_reference(gpt_oss_checkpoints() / name);
  }
}

TEST_CASE("Model.GptOssReference.HiddenStatesOfEveryLayerWithinBfloat16ToleranceOfTransformers") {
  // transformers' eager attention rounds the scores and the probabilities to
  // bf16, LibTorch's keeps them in float32; both against transformers'
  // float32, the error transformers' own bf16 makes on this machine (0.7% to
  // 8% on this fixture) is the bound.
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_bfloat16_states_near_transformers(gpt_oss_checkpoints() / name);
  }
}

TEST_CASE("Model.GptOssReference.GreedyDecodingPastTheWindowEqualsTransformersFloat64Argmax") {
  // 16 new tokens after 3 to 8: the cache runs well past the window of 4.
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_greedy_equals_float64_argmax(gpt_oss_checkpoints() / name);
  }
}

TEST_CASE("Model.GptOssReference.KVCacheAndPackedDocumentsEqualTheFullForward") {
  // Equal up to float32's rounding of other summation orders (other chunk
  // shapes of the attention), measured against the float64 forward.
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    const fs::path dir = gpt_oss_checkpoints() / name;
    const TargetModel target = TargetModel::load(dir), target64 = TargetModel::load(dir, torch::kCPU, torch::kFloat64);
    const auto layers = every_layer(target);
    const auto rows = id_lists(reference_json(dir)["rows"]);
    const torch::Tensor a = ids_tensor(rows[0]), b = ids_tensor(rows[1]);
    // Prefill 5 tokens, then 3 at once (queries past the window at both ends
    // of their keys), then one per call; and both rows packed in one.
    check_cache_and_packing_equal_full_forward(target, target64, layers, a, b, {5, 3});

    // Two right-padded rows in one batch: each real token as alone.
    const int64_t la = a.size(1), lb = b.size(1);
    const TargetOutput full_b = target.forward(b, layers, false), full_b64 = target64.forward(b, layers, false);
    torch::Tensor batch = torch::zeros({2, la}, torch::kInt64);
    batch[0].copy_(a[0]);
    batch[1].narrow(0, 0, lb).copy_(b[0]);
    const TargetOutput both = target.forward(batch, layers, false);
    for (size_t l = 0; l < layers.size(); ++l) {
      CAPTURE(l);
      check_within_float32_rounding(both.hidden_states[l][1].narrow(0, 0, lb), full_b.hidden_states[l][0],
                                    full_b64.hidden_states[l][0]);
    }
  }
}

TEST_CASE("Model.GptOssReference.ExpertsStoredAsMxfp4NeedTheirQuantizationConfig") {
  const fs::path source = gpt_oss_checkpoints() / "gpt-oss-mxfp4";
  ScratchDir dir("gpt-oss-no-quantization");
  for (const auto& entry : fs::directory_iterator(source)) {
    if (entry.path().extension() == ".safetensors" && entry.path().filename() != "reference.safetensors") {
      fs::copy_file(entry.path(), dir.path() / entry.path().filename());
    }
  }
  fs::copy_file(source / "model.safetensors.index.json", dir.path() / "model.safetensors.index.json");
  nlohmann::json config = read_json_file(source / "config.json");
  config.erase("quantization_config");
  std::ofstream(dir.path() / "config.json") << config.dump();
  CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("gate_up_proj_blocks' but config.json has no"),
                       std::runtime_error);
}
