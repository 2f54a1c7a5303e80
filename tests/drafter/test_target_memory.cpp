// The target's memory model (target/target_memory.hpp) against what a
// counting CPU allocator measures: the bytes a load keeps (converted to
// bfloat16, so that every kept tensor is allocated, none mapped from the
// file), the peak of one target_forward's context_features over a
// micro-batch, and generation's cache; on a dense Qwen3 and on Qwen3.5
// dense and MoE wrappers written by transformers (with their vision tower,
// which a load never reads and the model never counts).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "drafter/cpu_memory_counter.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"
#include "target/target.hpp"
#include "target/target_memory.hpp"
#include "target/tiny_target.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;
namespace fs = std::filesystem;

namespace {

// Qwen3.5's dense and MoE wrappers (Gated DeltaNet with fewer key heads than
// value heads, every 4th layer full attention; MoE: 8 experts, top 2, a
// shared expert; one MoE tied, its layers linear, full, linear).
const fs::path& qwen3_5_checkpoints() {
  static ScratchDir dir("target-memory-qwen3_5");
  static const bool written = [] {
    write_with_python("hf_qwen3_5_reference.py", dir.path(),
                      "--checkpoints-only qwen3_5-dense-untied qwen3_5-moe-untied qwen3_5-moe-tied-alternating");
    return true;
  }();
  (void)written;
  return dir.path();
}

// A dense Qwen3, a Qwen3-MoE and a gpt-oss (sinks, sliding layers of 32
// tokens, plain experts) wider than the shared tiny target, so the layers'
// working set, not a fixed overhead, is what is measured.
fs::path tiny_checkpoint(const std::string& arch, bool mxfp4 = false) {
  static ScratchDir dir("target-memory-tiny");
  const fs::path out = dir.path() / (arch + (mxfp4 ? "-mxfp4" : ""));
  if (fs::exists(out / "config.json")) return out;
  dflow::target::TinyTargetOptions options;
  options.out_dir = out;
  options.arch = arch;
  options.num_layers = 3;
  options.hidden_size = 128;
  options.num_heads = 8;
  options.num_kv_heads = 2;
  options.head_dim = 32;
  options.intermediate_size = 384;
  options.moe_intermediate_size = 256;
  options.seed = 11;
  options.mxfp4 = mxfp4;
  dflow::target::make_tiny_target(options);
  return out;
}

std::vector<fs::path> checkpoints() {
  return {tiny_checkpoint("qwen3"), tiny_checkpoint("qwen3_moe"), tiny_checkpoint("gpt_oss"),
          qwen3_5_checkpoints() / "qwen3_5-dense-untied",
          qwen3_5_checkpoints() / "qwen3_5-moe-untied", qwen3_5_checkpoints() / "qwen3_5-moe-tied-alternating"};
}

// The peak bytes of context_features over rows x length random tokens, beyond what was held before.
double measured_forward(const dflow::target::TargetModel& target, int64_t rows, int64_t length,
                        const std::vector<int64_t>& layers) {
  const torch::Tensor ids = torch::randint(target.config().vocab_size, {rows, length}, torch::kInt64);
  CpuMemoryCounter counter;
  { const torch::Tensor features = target.context_features(ids, layers); }
  return static_cast<double>(counter.peak_bytes());
}

}  // namespace

TEST_CASE("Model.TargetMemory.ResidentBytesAreTheLoadedTextModelsTensors") {
  torch::set_num_threads(1);
  for (const fs::path& dir : checkpoints()) {
    CAPTURE(dir.filename().string());
    int64_t loaded = 0;
    dflow::target::HFConfig config;
    {
      CpuMemoryCounter counter;
      const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir, torch::kCPU, torch::kBFloat16);
      loaded = counter.current_bytes();
      config = target.config();
    }
    const bool stored = dflow::target::checkpoint_stores_lm_head(dir);
    CHECK(dflow::target::target_resident_bytes(config, 2, stored) == loaded);
    // The wrappers' files hold the vision tower beside the text model: more bytes than a load keeps.
    int64_t files = 0;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".safetensors" && entry.path().filename() != "reference.safetensors")
        files += static_cast<int64_t>(entry.file_size());
    if (config.tensor_prefix != "model.") CHECK(dflow::target::target_resident_bytes(config, 4, stored) < files);
  }
}

TEST_CASE("Model.TargetMemory.Mxfp4ExpertsCountPackedOrDequantizedAsLoaded") {
  torch::set_num_threads(1);
  const fs::path dir = tiny_checkpoint("gpt_oss", /*mxfp4=*/true);
  dflow::target::TargetLoadOptions dequantize;
  dequantize.mxfp4_experts = dflow::target::Mxfp4Experts::dequantize;
  // (The first load also makes the dequantization's tables, kept for the process.)
  const dflow::target::TargetModel resident = dflow::target::TargetModel::load(dir, torch::kCPU, torch::kBFloat16);
  const dflow::target::TargetModel dequantized =
      dflow::target::TargetModel::load(dir, torch::kCPU, torch::kBFloat16, dequantize);
  int64_t dequantized_bytes = 0;
  {
    CpuMemoryCounter counter;  // dequantized on load: every kept tensor is allocated
    const dflow::target::TargetModel target =
        dflow::target::TargetModel::load(dir, torch::kCPU, torch::kBFloat16, dequantize);
    dequantized_bytes = counter.current_bytes();
  }
  const dflow::target::HFConfig& config = resident.config();
  REQUIRE(config.moe.mxfp4);
  const bool stored = dflow::target::checkpoint_stores_lm_head(dir);
  CHECK(dflow::target::target_resident_bytes(config, 2, stored, /*mxfp4_dequantized=*/true) == dequantized_bytes);
  // Kept packed, the experts' blocks and scales instead of their bf16 weights.
  CHECK(dflow::target::target_resident_bytes(config, 2, stored, true) -
            dflow::target::target_resident_bytes(config, 2, stored) ==
        dequantized.expert_projection_bytes() - resident.expert_projection_bytes());
}

TEST_CASE("Model.TargetMemory.AForwardsPeakIsBoundedByTheModel") {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  for (const fs::path& dir : checkpoints()) {
    for (const torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
      const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir, torch::kCPU, dtype);
      const dflow::target::HFConfig& config = target.config();
      const std::vector<int64_t> layers = {0, config.num_hidden_layers - 1};
      // Shorter than a chunk, padded to whole chunks, and longer than the delta rule's window.
      for (const auto& [rows, length] : std::vector<std::pair<int64_t, int64_t>>{{8, 40}, {2, 300}, {1, 4200}}) {
        const std::string name = dir.filename().string() + " " + c10::toString(dtype);
        CAPTURE(name);
        CAPTURE(rows);
        CAPTURE(length);
        dflow::target::TargetForwardShape shape;
        shape.rows = rows;
        shape.length = length;
        shape.element_bytes = static_cast<int64_t>(c10::elementSize(dtype));
        shape.features = static_cast<int64_t>(layers.size());
        const double modelled = dflow::target::estimate_target_forward(config, shape).total_bytes();
        const double measured = measured_forward(target, rows, length, layers);
        MESSAGE(name, " ", rows, "x", length, ": modelled ", modelled, " measured ", measured, " ratio ",
                modelled / measured);
        CHECK(modelled >= measured);
        CHECK(modelled <= 1.3 * measured);
      }
    }
  }
}

TEST_CASE("Model.TargetMemory.GenerationsCacheIsTheModelsBytes") {
  torch::set_num_threads(1);
  for (const fs::path& dir : checkpoints()) {
    CAPTURE(dir.filename().string());
    const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir, torch::kCPU, torch::kBFloat16);
    const torch::Tensor prompt = torch::randint(target.config().vocab_size, {1, 9}, torch::kInt64);
    const int64_t capacity = 48;
    CpuMemoryCounter counter;
    dflow::target::KVCache cache = target.new_cache(1, capacity);
    // The first call keeps the linear layers' states to roll back to beside them.
    { const dflow::target::TargetOutput out = target.forward_cached(cache, prompt, {}, /*want_logits=*/true); }
    CHECK(counter.current_bytes() == dflow::target::target_cache_bytes(target.config(), 2, capacity));
  }
}
