#pragma once
// A copy of a target checkpoint whose decoder layers are stored as large
// targets ship them, in dtypes dflow does not read (FP8, INT4 packed into
// I32), with its embedding, LM head and final norm left as they were: what a
// head-only run (features.engine, features.cached, export) reads. The files
// are written byte by byte (dflow's writer refuses such dtypes), as
// transformers and compressed-tensors lay them out.
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target/hf_config.hpp"
#include "formats/safetensors.hpp"
#include "target/target_head.hpp"

namespace dflow::target::testing {

enum class QuantizedLayout {
  fp8_e4m3,     // <w>.weight F8_E4M3 + <w>.weight_scale_inv F32, quant_method fp8 (DeepSeek, Qwen3 FP8)
  fp8_e5m2,     // the same in F8_E5M2
  int4_packed,  // compressed-tensors pack-quantized: <w>.weight_packed I32 + weight_scale BF16 + weight_shape I64
};

struct RawTensor {
  std::string name;
  std::string dtype_name;  // as the header writes it: "F8_E4M3", "I32", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline RawTensor raw_tensor(const std::string& name, const std::string& dtype_name, const torch::Tensor& t) {
  const auto c = t.contiguous();
  return {name, dtype_name, c.sizes().vec(), std::string(static_cast<const char*>(c.data_ptr()), c.nbytes())};
}
inline RawTensor raw_tensor(const std::string& name, const torch::Tensor& t) {
  return raw_tensor(name, dflow::formats::torch_dtype_to_safetensors(t.scalar_type()), t);
}

// A safetensors file of any dtype names: header, then the tensors back to back.
inline void write_raw_safetensors(const std::filesystem::path& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype_name}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t size = text.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << text;
  for (const auto& t : tensors) out << t.bytes;
}

// The tensors that stand for one float linear weight `name` ("...q_proj.weight") in `layout`.
inline std::vector<RawTensor> quantized(const std::string& name, const torch::Tensor& weight, QuantizedLayout layout) {
  const auto w = weight.to(torch::kFloat32);
  if (layout == QuantizedLayout::int4_packed) {
    const std::string base = name.substr(0, name.size() - std::string("weight").size());
    const int64_t out = w.size(0), in = w.size(1), groups = (in + 31) / 32;
    // Values arbitrary (nothing reads them); the shapes are compressed-tensors'.
    return {raw_tensor(base + "weight_packed", torch::randint(-(1 << 30), 1 << 30, {out, (in + 7) / 8}, torch::kInt32)),
            raw_tensor(base + "weight_scale", w.abs().amax(1, true).expand({out, groups}).to(torch::kBFloat16)),
            raw_tensor(base + "weight_shape", torch::tensor(std::vector<int64_t>{out, in}))};
  }
  const bool e4m3 = layout == QuantizedLayout::fp8_e4m3;
  const auto scale = w.abs().amax().clamp_min(1e-12) / (e4m3 ? 448.0 : 57344.0);
  const auto fp8 = (w / scale).to(e4m3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2);
  return {raw_tensor(name, e4m3 ? "F8_E4M3" : "F8_E5M2", fp8), raw_tensor(name + "_scale_inv", scale.reshape({1, 1}))};
}

struct QuantizedCopy {
  torch::Tensor embedding, lm_head, final_norm;  // what the head must read, as written
};

// Copies checkpoint `from` (its config.json, tokenizer and other files) to
// `to`: every 2-D weight under model.layers stored in `layout`, the head
// unquantized; tied (no lm_head.weight) or untied (an lm_head of its own: the
// source's, or the negated embedding when the source is tied); in one file or
// two shards through model.safetensors.index.json, each shard holding both
// quantized layers and a head tensor.
inline QuantizedCopy write_quantized_copy(const std::filesystem::path& from, const std::filesystem::path& to,
                                          QuantizedLayout layout, bool tied, bool sharded) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  for (const auto& item : fs::directory_iterator(from)) {
    const auto name = item.path().filename().string();
    if (item.is_regular_file() && item.path().extension() != ".safetensors" && name != "model.safetensors.index.json")
      fs::copy_file(item.path(), to / name, fs::copy_options::overwrite_existing);
  }
  dflow::formats::TensorMap tensors = dflow::formats::load_checkpoint_dir(from);
  QuantizedCopy head;
  head.embedding = tensors.at(TargetHead::kEmbeddingName);
  head.final_norm = tensors.at(TargetHead::kFinalNormName);
  if (tied) {
    tensors.erase(TargetHead::kLmHeadName);
    head.lm_head = head.embedding;
  } else {
    if (!tensors.count(TargetHead::kLmHeadName)) tensors[TargetHead::kLmHeadName] = -head.embedding;
    head.lm_head = tensors.at(TargetHead::kLmHeadName);
  }
  std::vector<RawTensor> shards[2];
  int layer_tensors = 0;
  for (const auto& [name, tensor] : tensors) {
    const bool is_head = name == TargetHead::kEmbeddingName || name == TargetHead::kLmHeadName ||
                         name == TargetHead::kFinalNormName;
    // The embedding in shard 0, the LM head and the norm in shard 1, layers alternating.
    auto& shard = shards[!sharded ? 0 : is_head ? name != TargetHead::kEmbeddingName : layer_tensors++ % 2];
    if (name.rfind("model.layers.", 0) == 0 && tensor.dim() == 2) {
      for (auto& raw : quantized(name, tensor, layout)) shard.push_back(std::move(raw));
    } else {
      shard.push_back(raw_tensor(name, tensor));
    }
  }
  if (!sharded) {
    write_raw_safetensors(to / "model.safetensors", shards[0]);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (int s = 0; s < 2; ++s) {
      const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
      write_raw_safetensors(to / file, shards[s]);
      for (const auto& t : shards[s]) weight_map[t.name] = file;
    }
    std::ofstream(to / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  }
  nlohmann::json config = read_json_file(to / "config.json");
  config["tie_word_embeddings"] = tied;
  config["quantization_config"] =
      layout == QuantizedLayout::int4_packed
          ? nlohmann::json{{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}}
          : nlohmann::json{{"quant_method", "fp8"}, {"fmt", layout == QuantizedLayout::fp8_e4m3 ? "e4m3" : "e5m2"}};
  std::ofstream(to / "config.json") << config.dump(2);
  return head;
}

}  // namespace dflow::target::testing
