// The target's head read from checkpoints whose other tensors are in dtypes
// dflow does not read, as large targets ship (FP8 E4M3 and E5M2 with scales,
// compressed-tensors INT4 packed into I32): the head loads, tied and untied,
// single file and sharded; a head tensor itself in such a dtype is refused
// naming the tensor, its dtype and the file; a malformed entry is still refused.
#include <doctest/doctest.h>

#include "target/target_head.hpp"
#include "target/model_fixtures.hpp"
#include "target/quantized_checkpoint.hpp"

using namespace dflow::target;
using dflow::target::testing::QuantizedLayout;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;
namespace fs = std::filesystem;

namespace {

std::string head_error(const fs::path& dir) {
  try {
    TargetHead::load(dir, torch::kCPU, torch::kFloat32, /*with_final_norm=*/true);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Model.TargetHead.reads_its_head_from_fp8_and_int4_packed_checkpoints_skipping_the_rest") {
  struct Layout {
    QuantizedLayout layout;
    const char* name;
    const char* stored_as;  // the dtype of model.layers.0.self_attn.q_proj's main tensor
    const char* quantized_name;
  };
  const Layout layouts[] = {
      {QuantizedLayout::fp8_e4m3, "fp8-e4m3", "F8_E4M3", "model.layers.0.self_attn.q_proj.weight"},
      {QuantizedLayout::fp8_e5m2, "fp8-e5m2", "F8_E5M2", "model.layers.0.self_attn.q_proj.weight"},
      {QuantizedLayout::int4_packed, "int4-packed", "I32", "model.layers.0.self_attn.q_proj.weight_packed"}};
  ScratchDir scratch("quantized-head");
  for (const auto& l : layouts)
    for (const bool tied : {true, false})
      for (const bool sharded : {false, true}) {
        const std::string name = std::string(l.name) + (tied ? "-tied" : "-untied") + (sharded ? "-sharded" : "-single");
        CAPTURE(name);
        const fs::path dir = scratch.path() / name;
        const auto written = testing::write_quantized_copy(tiny_target_dir(), dir, l.layout, tied, sharded);
        // The copy really holds its layers in that layout, in every file.
        const std::vector<fs::path> files =
            sharded ? std::vector<fs::path>{dir / "model-00001-of-00002.safetensors", dir / "model-00002-of-00002.safetensors"}
                    : std::vector<fs::path>{dir / "model.safetensors"};
        bool named = false;
        for (const auto& path : files) {
          const dflow::formats::SafetensorsFile file(path);  // listed, not refused
          int quantized_here = 0;
          for (const auto& n : file.names()) quantized_here += file.entry(n).dtype_name == l.stored_as;
          CHECK(quantized_here > 0);
          if (!file.contains(l.quantized_name)) continue;
          named = true;
          const std::string refusal = "tensor '" + std::string(l.quantized_name) + "' is stored as " + l.stored_as +
                                      ", a dtype dflow does not read";
          if (l.layout != QuantizedLayout::int4_packed)
            CHECK_THROWS_WITH_AS(file.tensor(l.quantized_name), doctest::Contains(refusal.c_str()), std::runtime_error);
        }
        CHECK(named);

        const TargetHead head = TargetHead::load(dir, torch::kCPU, torch::kFloat32, /*with_final_norm=*/true);
        CHECK(head.tied() == tied);
        CHECK(torch::equal(head.embedding_weight(), written.embedding.to(torch::kFloat32)));
        CHECK(torch::equal(head.lm_head_weight(), written.lm_head.to(torch::kFloat32)));
        CHECK(torch::equal(head.final_norm_weight(), written.final_norm.to(torch::kFloat32)));
        if (!tied) CHECK_FALSE(torch::equal(head.lm_head_weight(), head.embedding_weight()));
      }
}

TEST_CASE("Model.TargetHead.a_head_tensor_in_a_dtype_dflow_does_not_read_is_refused_naming_it") {
  ScratchDir scratch("quantized-head-refused");
  for (const bool sharded : {false, true}) {
    CAPTURE(sharded);
    const fs::path dir = scratch.path() / (sharded ? "sharded" : "single");
    testing::write_quantized_copy(tiny_target_dir(), dir, QuantizedLayout::fp8_e4m3, /*tied=*/false, sharded);
    // The LM head quantized too, as some FP8 checkpoints ship it: rewritten in its file as F8_E4M3.
    const fs::path file = dir / (sharded ? "model-00002-of-00002.safetensors" : "model.safetensors");
    std::vector<testing::RawTensor> tensors;
    const dflow::formats::SafetensorsFile original(file);
    for (const auto& n : original.names()) {
      const auto& e = original.entry(n);
      if (n == TargetHead::kLmHeadName) {
        tensors.push_back(testing::raw_tensor(n, "F8_E4M3", original.tensor(n).to(torch::kFloat8_e4m3fn)));
      } else if (e.dtype_name == "F8_E4M3") {
        tensors.push_back({n, e.dtype_name, e.shape, std::string(e.data_end_bytes - e.data_begin_bytes, '\0')});
      } else {
        tensors.push_back(testing::raw_tensor(n, original.tensor(n).clone()));
      }
    }
    testing::write_raw_safetensors(file, tensors);
    const std::string error = head_error(dir);
    CHECK(error.find("safetensors file '" + file.string() + "'") != std::string::npos);
    CHECK(error.find("tensor 'lm_head.weight' is stored as F8_E4M3, a dtype dflow does not read (it reads F64 F32 F16 "
                     "BF16") != std::string::npos);
  }
}

TEST_CASE("Model.TargetHead.a_malformed_entry_it_skips_is_still_refused_naming_the_file") {
  ScratchDir scratch("quantized-head-malformed");
  const fs::path dir = scratch.path() / "copy";
  testing::write_quantized_copy(tiny_target_dir(), dir, QuantizedLayout::fp8_e4m3, /*tied=*/true, /*sharded=*/false);
  // An FP8 entry whose offsets run past the file's end: the header is corrupt, whatever the head needs.
  const fs::path file = dir / "model.safetensors";
  std::vector<testing::RawTensor> readable, fp8;  // the FP8 entries written last
  {
    const dflow::formats::SafetensorsFile original(file);
    for (const auto& n : original.names()) {
      const auto& e = original.entry(n);
      if (e.dtype_name == "F8_E4M3")
        fp8.push_back({n, e.dtype_name, e.shape, std::string(e.data_end_bytes - e.data_begin_bytes, '\0')});
      else
        readable.push_back(testing::raw_tensor(n, original.tensor(n).clone()));
    }
  }
  REQUIRE_FALSE(fp8.empty());
  readable.insert(readable.end(), fp8.begin(), fp8.end());
  testing::write_raw_safetensors(file, readable);
  fs::resize_file(file, fs::file_size(file) - 1);  // the last FP8 entry now ends past the file
  const std::string last = "tensor '" + fp8.back().name + "'";
  const std::string error = head_error(dir);
  CHECK(error.find("safetensors file '" + file.string() + "'") != std::string::npos);
  CHECK(error.find(last) != std::string::npos);
  CHECK(error.find("fall outside the file's data section") != std::string::npos);
}
