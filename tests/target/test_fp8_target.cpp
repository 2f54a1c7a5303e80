// FP8 targets in-process (quant_method fp8: float8 E4M3 linear weights with a
// float32 scale per 32x32 block, per row or per tensor, as Qwen3-FP8 and
// transformers' FineGrainedFP8 write them): a target loaded from such a
// checkpoint holds exactly the dequantized weights (value x its block's
// scale, computed here element by element in float64, independently of
// dflow's broadcast), so its logits and its greedy decoding equal those of
// a float32 checkpoint of those weights, which the reference tests compare
// with transformers. Bad input is refused naming the directory and tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "formats/json_file.hpp"
#include "target/fp8.hpp"
#include "target/model_fixtures.hpp"
#include "target/quantized_checkpoint.hpp"
#include "target/target.hpp"

using namespace dflow::target;
using dflow::target::testing::RawTensor;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;
namespace fs = std::filesystem;

namespace {

enum class Scales { block32, per_row, per_tensor };

// The FP8 copy of the tiny target in `fp8` and the float32 checkpoint of its
// dequantized weights in `dequantized`.
void write_fp8_and_dequantized(const fs::path& fp8, const fs::path& dequantized, Scales scales) {
  for (const auto& dir : {fp8, dequantized}) {
    fs::create_directories(dir);
    for (const auto& item : fs::directory_iterator(tiny_target_dir()))
      if (item.path().extension() != ".safetensors") fs::copy_file(item.path(), dir / item.path().filename());
  }
  std::vector<RawTensor> raw;
  std::vector<std::pair<std::string, torch::Tensor>> plain;
  for (const auto& [name, tensor] : dflow::formats::load_checkpoint_dir(tiny_target_dir())) {
    const auto w = tensor.to(torch::kFloat32);
    if (name.rfind("model.layers.", 0) != 0 || w.dim() != 2) {
      raw.push_back(testing::raw_tensor(name, w));
      plain.emplace_back(name, w);
      continue;
    }
    const int64_t out = w.size(0), in = w.size(1);
    const int64_t rows = scales == Scales::block32 ? 32 : scales == Scales::per_row ? 1 : out;
    const int64_t cols = scales == Scales::block32 ? 32 : in;
    const int64_t so = (out + rows - 1) / rows, si = (in + cols - 1) / cols;
    auto scale = torch::empty({so, si}, torch::kFloat32);
    auto q = torch::empty({out, in}, torch::kFloat32);
    for (int64_t bo = 0; bo < so; ++bo)
      for (int64_t bi = 0; bi < si; ++bi) {
        auto block = w.slice(0, bo * rows, std::min(out, (bo + 1) * rows)).slice(1, bi * cols, std::min(in, (bi + 1) * cols));
        const float s = std::max(block.abs().max().item<float>(), 1e-12f) / 448.0f;
        scale[bo][bi] = s;
        q.slice(0, bo * rows, std::min(out, (bo + 1) * rows)).slice(1, bi * cols, std::min(in, (bi + 1) * cols)) = block / s;
      }
    const auto values = q.to(torch::kFloat8_e4m3fn);
    // The reference dequantization, one element at a time in float64.
    const auto v64 = values.to(torch::kFloat64);
    auto d = torch::empty({out, in}, torch::kFloat64);
    auto va = v64.accessor<double, 2>();
    auto sa = scale.accessor<float, 2>();
    auto da = d.accessor<double, 2>();
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) da[r][c] = va[r][c] * static_cast<double>(sa[r / rows][c / cols]);
    plain.emplace_back(name, d.to(torch::kFloat32));
    raw.push_back(testing::raw_tensor(name, "F8_E4M3", values));
    raw.push_back(testing::raw_tensor(name + "_scale_inv",
                                      scales == Scales::per_row ? scale.reshape({out}) : scale));
  }
  testing::write_raw_safetensors(fp8 / "model.safetensors", raw);
  dflow::formats::write_safetensors(dequantized / "model.safetensors", plain);
  nlohmann::json config = read_json_file(fp8 / "config.json");
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}};
  if (scales == Scales::block32) config["quantization_config"]["weight_block_size"] = {32, 32};
  dflow::formats::write_json_atomically(fp8 / "config.json", config);
}

std::string load_error(const fs::path& dir) {
  try {
    TargetModel::load(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Model.Fp8Target.loads_the_dequantized_weights_and_decodes_as_their_float32_checkpoint") {
  ScratchDir scratch("fp8-target");
  for (const Scales scales : {Scales::block32, Scales::per_row, Scales::per_tensor}) {
    CAPTURE(static_cast<int>(scales));
    const auto fp8 = scratch.path() / ("fp8-" + std::to_string(static_cast<int>(scales)));
    const auto reference = scratch.path() / ("dequantized-" + std::to_string(static_cast<int>(scales)));
    write_fp8_and_dequantized(fp8, reference, scales);
    const auto quantized = TargetModel::load(fp8);
    const auto plain = TargetModel::load(reference);
    // Each float32 product of a float8 value and a float32 scale is exact
    // in float64 and rounds once: the weights are the reference's bit for bit.
    const auto input = torch::tensor({{5, 17, 99, 3, 42, 7, 8, 9, 11, 300}}, torch::kInt64);
    const auto a = quantized.forward(input, {0, 2}, /*want_logits=*/true);
    const auto b = plain.forward(input, {0, 2}, /*want_logits=*/true);
    CHECK(torch::equal(a.logits, b.logits));
    CHECK(torch::equal(a.hidden_states[1], b.hidden_states[1]));
    CHECK(quantized.generate({5, 17, 99, 3}, 24, 0.0, 0, {}) == plain.generate({5, 17, 99, 3}, 24, 0.0, 0, {}));
    // And they are not the original weights: the copy really is quantized.
    const auto original = TargetModel::load(tiny_target_dir());
    CHECK_FALSE(torch::equal(original.forward(input, {}, true).logits, a.logits));
  }
}

TEST_CASE("Model.Fp8Target.bad_fp8_checkpoints_are_refused_naming_the_tensor") {
  ScratchDir scratch("fp8-bad");
  const auto good = scratch.path() / "good", reference = scratch.path() / "reference";
  write_fp8_and_dequantized(good, reference, Scales::block32);
  auto copy_with = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit_config,
                       const std::function<void(std::vector<RawTensor>&)>& edit_tensors) {
    const auto dir = scratch.path() / name;
    fs::create_directories(dir);
    for (const auto& item : fs::directory_iterator(good)) fs::copy_file(item.path(), dir / item.path().filename());
    nlohmann::json config = read_json_file(dir / "config.json");
    if (edit_config) edit_config(config);
    dflow::formats::write_json_atomically(dir / "config.json", config);
    if (edit_tensors) {
      std::vector<RawTensor> raw;
      const dflow::formats::SafetensorsFile file(good / "model.safetensors");
      for (const auto& n : file.names()) {
        const auto& e = file.entry(n);
        const auto t = file.tensor(n, /*with_float8=*/true);
        raw.push_back(testing::raw_tensor(n, e.dtype_name, t));
      }
      edit_tensors(raw);
      testing::write_raw_safetensors(dir / "model.safetensors", raw);
    }
    return dir;
  };
  const std::string q = "model.layers.1.mlp.up_proj.weight";
  auto without_scale = copy_with("no-scale", {}, [&](std::vector<RawTensor>& raw) {
    std::erase_if(raw, [&](const RawTensor& t) { return t.name == q + "_scale_inv"; });
  });
  CHECK(load_error(without_scale).find("tensor '" + q + "' is stored as Float8_e4m3fn without a scale") !=
        std::string::npos);
  auto other_blocks = copy_with("blocks-64", [](nlohmann::json& c) { c["quantization_config"]["weight_block_size"] = {64, 64}; }, {});
  CHECK(load_error(other_blocks).find("does not tile weight") != std::string::npos);
  auto bad_block = copy_with("block-text", [](nlohmann::json& c) { c["quantization_config"]["weight_block_size"] = "128"; }, {});
  CHECK(load_error(bad_block).find("weight_block_size \"128\" is not two positive integers") != std::string::npos);
  auto gptq = copy_with("gptq", [](nlohmann::json& c) { c["quantization_config"] = {{"quant_method", "gptq"}}; }, {});
  CHECK(load_error(gptq).find("quantization_config {\"quant_method\":\"gptq\"} is not supported for qwen3") !=
        std::string::npos);
  auto e3m4 = copy_with("fmt", [](nlohmann::json& c) { c["quantization_config"]["fmt"] = "e3m4"; }, {});
  CHECK(load_error(e3m4).find("quantization_config.fmt 'e3m4' is not an FP8 format dflow reads") != std::string::npos);
}
