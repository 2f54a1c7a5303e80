// gpt-oss's MXFP4 experts kept resident (packed uint8, each expert
// dequantized while it computes) against the same checkpoint dequantized on
// load: the same bits out of every layer, in float32 and bfloat16, the
// packed form holding only uint8 blocks and scales, its bytes the MXFP4
// formula's, and gpt-oss-120b's expert memory as docs/targets.md states it. The
// checkpoints are transformers' (tests/target/hf_gpt_oss_reference.py).
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "target/hf_config.hpp"
#include "target/mxfp4.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/target_load_families.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using dflow::target::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path& mxfp4_checkpoint() {
  static ScratchDir dir("mxfp4-resident");
  static const bool written = [] {
    if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
    const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                     "/tests/target/hf_gpt_oss_reference.py " + dir.path().string(),
                                                 600);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return true;
  }();
  (void)written;
  static const fs::path checkpoint = dir.path() / "gpt-oss-mxfp4";
  return checkpoint;
}

std::vector<int64_t> every_layer(const TargetModel& target) {
  std::vector<int64_t> ids;
  for (int64_t l = 0; l < target.num_layers(); ++l) ids.push_back(l);
  return ids;
}

TargetModel load(torch::Dtype dtype, Mxfp4Experts mode) {
  return TargetModel::load(mxfp4_checkpoint(), torch::kCPU, dtype, TargetLoadOptions{mode});
}

}  // namespace

TEST_CASE("Model.Mxfp4Resident.EveryLayerIsTheSameBitsAsDequantizedOnLoad") {
  torch::set_num_threads(1);
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::string dtype_name(c10::toString(dtype));
    CAPTURE(dtype_name);
    const TargetModel resident = load(dtype, Mxfp4Experts::resident);
    const TargetModel dequantized = load(dtype, Mxfp4Experts::dequantize);
    torch::manual_seed(7);
    // Two rows of 40 tokens: every expert gets tokens, and the second row's
    // routing differs from the first's.
    const torch::Tensor ids = torch::randint(resident.config().vocab_size, {2, 40}, torch::kInt64);
    const TargetOutput a = resident.forward(ids, every_layer(resident), /*want_logits=*/true);
    const TargetOutput b = dequantized.forward(ids, every_layer(dequantized), /*want_logits=*/true);
    for (size_t layer = 0; layer < a.hidden_states.size(); ++layer) {
      CAPTURE(layer);
      CHECK(torch::equal(a.hidden_states[layer], b.hidden_states[layer]));
    }
    CHECK(torch::equal(a.logits, b.logits));
    const std::vector<int64_t> prompt(ids[0].data_ptr<int64_t>(), ids[0].data_ptr<int64_t>() + 12);
    CHECK(resident.generate(prompt, 8, 0.0, 0, {}) == dequantized.generate(prompt, 8, 0.0, 0, {}));
  }
}

TEST_CASE("Model.Mxfp4Resident.HoldsTheCheckpointsUint8BlocksAndScalesOnly") {
  const HFConfig config = load_hf_config(mxfp4_checkpoint());
  REQUIRE(config.moe.mxfp4);
  const int64_t e = config.moe.num_experts, h = config.hidden_size, i = config.moe.expert_intermediate_size;
  const WeightSource source(dflow::formats::load_checkpoint_dir(mxfp4_checkpoint()), mxfp4_checkpoint(), torch::kCPU,
                            torch::kBFloat16);
  const ExpertWeights w = load_gpt_oss_experts(source, "model.layers.0.mlp.", config, Mxfp4Experts::resident);
  CHECK(w.packed());
  CHECK_FALSE(w.gate_up.defined());
  CHECK_FALSE(w.down.defined());
  for (const torch::Tensor* t : {&w.gate_up_blocks, &w.gate_up_scales, &w.down_blocks, &w.down_scales}) {
    CHECK((t->scalar_type() == torch::kUInt8));
  }
  CHECK((w.gate_up_blocks.sizes() == c10::IntArrayRef({e, 2 * i, h / 32, 16})));
  CHECK((w.down_blocks.sizes() == c10::IntArrayRef({e, h, i / 32, 16})));
  CHECK(w.intermediate_size() == i);
  CHECK((w.packed_dtype == torch::kBFloat16));
  // Dequantized, the packed rows are the load-time dequantization's rows
  // (the gate/up de-interleave applied to the packed rows is exact).
  const ExpertWeights d = load_gpt_oss_experts(source, "model.layers.0.mlp.", config, Mxfp4Experts::dequantize);
  CHECK_FALSE(d.packed());
  CHECK(torch::equal(mxfp4_dequantize(w.gate_up_blocks, w.gate_up_scales, torch::kCPU, torch::kBFloat16), d.gate_up));
  CHECK(torch::equal(mxfp4_dequantize(w.down_blocks, w.down_scales, torch::kCPU, torch::kBFloat16), d.down));

  // The whole target's expert memory: the packed size resident, 2 bytes a
  // weight dequantized to bf16.
  const int64_t layers = config.num_hidden_layers;
  const TargetModel resident = load(torch::kBFloat16, Mxfp4Experts::resident);
  const TargetModel dequantized = load(torch::kBFloat16, Mxfp4Experts::dequantize);
  const int64_t packed_bytes = layers * (mxfp4_bytes(e * 2 * i, h) + mxfp4_bytes(e * h, i));
  CHECK(resident.expert_projection_bytes() == packed_bytes);
  CHECK(dequantized.expert_projection_bytes() == layers * e * 3 * h * i * 2);
  MESSAGE("tiny MXFP4 target's experts: resident " << resident.expert_projection_bytes() << " bytes, bf16 "
                                                  << dequantized.expert_projection_bytes() << " bytes");
}

TEST_CASE("Model.Mxfp4Resident.GptOss120bExpertsFitOneGpuOnlyResident") {
  // gpt-oss-120b: 36 layers of 128 experts, hidden 2880, intermediate 2880.
  const int64_t layers = 36, e = 128, h = 2880, i = 2880;
  const int64_t resident = layers * (mxfp4_bytes(e * 2 * i, h) + mxfp4_bytes(e * h, i));
  const int64_t bf16 = layers * e * 3 * h * i * 2;
  CHECK(resident == 60'914'073'600);  // docs/targets.md's and bench/RESULTS.md's figure
  CHECK(bf16 == 229'323'571'200);
}

TEST_CASE("Model.Mxfp4Resident.TheSettingIsResidentOrDequantize") {
  CHECK((parse_mxfp4_experts("resident") == Mxfp4Experts::resident));
  CHECK((parse_mxfp4_experts("dequantize") == Mxfp4Experts::dequantize));
  CHECK((TargetLoadOptions{}.mxfp4_experts == Mxfp4Experts::resident));
  CHECK_THROWS_WITH_AS(parse_mxfp4_experts("fp4"), doctest::Contains("model.target.mxfp4_experts: 'fp4'"),
                       std::invalid_argument);
}
