// dflow's Qwen3-MoE target against transformers (independent Python code in
// the venv) on small random checkpoints it wrote (tests/target/hf_moe_reference.py):
// every layer's hidden state (the drafter's features; the last after the
// final norm) in float32 and bfloat16, greedy decoding against transformers'
// float64 argmax, and dflow's other paths to the same features (the KV cache,
// packed documents) against its full forward.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target/documents.hpp"
#include "target/hf_config.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using namespace dflow::target::testing;
namespace fs = std::filesystem;

namespace {

const char* const kCheckpoints[] = {"qwen3-moe-norm-topk", "qwen3-moe-sparse-step"};

// The checkpoints and their references, written once per test process.
const fs::path& moe_checkpoints() {
  static ScratchDir dir("hf-moe");
  static const bool written = (dflow::target::testing::write_with_python("hf_moe_reference.py", dir.path()), true);
  (void)written;
  return dir.path();
}

}  // namespace

TEST_CASE("Model.MoeReference.LoadsTheSparseAndDenseLayersTransformersWrote") {
  // The first checkpoint: layer 1 dense by mlp_only_layers; the second:
  // layers 1 and 3 sparse by decoder_sparse_step 2, eleven shards.
  const HFConfig a = TargetModel::load(moe_checkpoints() / kCheckpoints[0]).config();
  CHECK(a.moe.sparse_layers == std::vector<bool>{true, false, true});
  CHECK(a.moe.norm_topk_prob);
  const fs::path sharded = moe_checkpoints() / kCheckpoints[1];
  CHECK(fs::exists(sharded / "model.safetensors.index.json"));
  const HFConfig b = TargetModel::load(sharded).config();
  CHECK(b.moe.sparse_layers == std::vector<bool>{false, true, false, true});
  CHECK_FALSE(b.moe.norm_topk_prob);
  CHECK(b.attention_bias);
}

TEST_CASE("Model.MoeReference.HiddenStatesOfEveryLayerEqualTransformersFloat32") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_float32_states_equal_reference(moe_checkpoints() / name);
  }
}

TEST_CASE("Model.MoeReference.HiddenStatesOfEveryLayerWithinBfloat16ToleranceOfTransformers") {
  // transformers in bf16 against dflow in bf16, the same checkpoint converted
  // on load, both against transformers' float32. (With one thread dflow
  // follows transformers' op order and dtypes so closely that the bf16
  // states come out equal bit for bit, at every ISA PyTorch's kernels were
  // forced to; the bound is still transformers' own bf16 error, which other
  // kernels may round elsewhere.)
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_bfloat16_states_near_transformers(moe_checkpoints() / name);
  }
}

TEST_CASE("Model.MoeReference.GreedyDecodingEqualsTransformersFloat64Argmax") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    check_greedy_equals_float64_argmax(moe_checkpoints() / name);
  }
}

TEST_CASE("Model.MoeReference.KVCacheAndPackedDocumentsEqualTheFullForward") {
  torch::set_num_threads(1);
  for (const std::string name : kCheckpoints) {
    CAPTURE(name);
    const fs::path dir = moe_checkpoints() / name;
    const TargetModel target = TargetModel::load(dir), target64 = TargetModel::load(dir, torch::kCPU, torch::kFloat64);
    const auto layers = every_layer(target);
    const auto rows = id_lists(reference_json(dir)["rows"]);
    const torch::Tensor a = ids_tensor(rows[0]), b = ids_tensor(rows[1]);
    check_cache_and_packing_equal_full_forward(target, target64, layers, a, b, {5});
  }
}

namespace {

// The checkpoint's tensors with its sparse layers' experts fused as
// transformers holds them in memory (mlp.experts.gate_up_proj [E, 2I, H],
// mlp.experts.down_proj [E, H, I]), written to `dir` with its config.json.
dflow::formats::TensorMap fused_experts(const fs::path& source, const HFConfig& config) {
  dflow::formats::TensorMap tensors = dflow::formats::load_checkpoint_dir(source);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!config.moe.sparse(layer)) continue;
    const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    std::vector<torch::Tensor> gate_up, down;
    for (int64_t e = 0; e < config.moe.num_experts; ++e) {
      const std::string expert = prefix + std::to_string(e) + ".";
      gate_up.push_back(torch::cat({tensors.at(expert + "gate_proj.weight"), tensors.at(expert + "up_proj.weight")}));
      down.push_back(tensors.at(expert + "down_proj.weight"));
      for (const char* name : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) tensors.erase(expert + name);
    }
    tensors[prefix + "gate_up_proj"] = torch::stack(gate_up);
    tensors[prefix + "down_proj"] = torch::stack(down);
  }
  return tensors;
}

void write_checkpoint(const fs::path& dir, const fs::path& config_from, const dflow::formats::TensorMap& tensors) {
  fs::copy_file(config_from / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  dflow::formats::write_safetensors(dir / "model.safetensors", {tensors.begin(), tensors.end()});
}

}  // namespace

TEST_CASE("Model.MoeReference.FusedExpertsLoadAsThePerExpertTensorsAndOtherLayoutsAreRefused") {
  const fs::path source = moe_checkpoints() / kCheckpoints[0];
  const TargetModel per_expert = TargetModel::load(source);
  const HFConfig& config = per_expert.config();
  const torch::Tensor ids = ids_tensor(id_lists(reference_json(source)["rows"])[0]);
  const torch::Tensor expected = per_expert.forward(ids, {config.num_hidden_layers - 1}, true).logits;
  const torch::Tensor expected64 =
      TargetModel::load(source, torch::kCPU, torch::kFloat64).forward(ids, {config.num_hidden_layers - 1}, true).logits;

  ScratchDir dir("hf-moe-fused");
  dflow::formats::TensorMap tensors = fused_experts(source, config);
  write_checkpoint(dir.path(), source, tensors);
  // Equal up to the GEMM kernels' float32 roundings: the fused tensors are
  // used where they lie in the file's mapping, the stacked ones are copies,
  // and BLAS may take another path for another alignment.
  check_within_float32_rounding(
      TargetModel::load(dir.path()).forward(ids, {config.num_hidden_layers - 1}, true).logits, expected, expected64);

  SUBCASE("both layouts in one layer") {
    tensors["model.layers.0.mlp.experts.0.gate_proj.weight"] = torch::zeros({32, 64});
    write_checkpoint(dir.path(), source, tensors);
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("model.layers.0.mlp.experts.0.gate_proj.weight"),
                         std::runtime_error);
  }
  SUBCASE("a fused tensor of another shape") {
    tensors["model.layers.2.mlp.experts.down_proj"] = torch::zeros({8, 32, 64});
    write_checkpoint(dir.path(), source, tensors);
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("'model.layers.2.mlp.experts.down_proj' has shape [8, 32, 64]"),
                         std::runtime_error);
  }
  SUBCASE("an expert's tensor missing") {
    dflow::formats::TensorMap per = dflow::formats::load_checkpoint_dir(source);
    per.erase("model.layers.2.mlp.experts.7.up_proj.weight");
    write_checkpoint(dir.path(), source, per);
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()),
                         doctest::Contains("lacks tensor 'model.layers.2.mlp.experts.7.up_proj.weight'"),
                         std::runtime_error);
  }
  SUBCASE("more experts than config.json says") {
    dflow::formats::TensorMap per = dflow::formats::load_checkpoint_dir(source);
    per["model.layers.0.mlp.experts.8.gate_proj.weight"] = torch::zeros({32, 64});
    write_checkpoint(dir.path(), source, per);
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("model.layers.0.mlp.experts.8.gate_proj.weight"),
                         std::runtime_error);
  }
  SUBCASE("no router") {
    tensors.erase("model.layers.0.mlp.gate.weight");
    write_checkpoint(dir.path(), source, tensors);
    CHECK_THROWS_WITH_AS(TargetModel::load(dir.path()), doctest::Contains("lacks tensor 'model.layers.0.mlp.gate.weight'"),
                         std::runtime_error);
  }
}
