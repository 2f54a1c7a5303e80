// What the drafter uses of its target when it does not run it: the frozen
// embedding and LM head (one tensor when tied), the final norm when asked
// for, and config.json's facts (target/hf_config.hpp HeadConfig). Loads from
// any decoder's checkpoint, also one whose family dflow cannot run or a
// multimodal wrapper's (Qwen3.5/3.6, Qwen3-VL, Llama 4), reading
// only these tensors' bytes (read_checkpoint_tensors); a loaded TargetModel
// gives its own without a copy (TargetModel::head()).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "target/hf_config.hpp"

namespace dflow::target {

class TargetHead {
 public:
  // The checkpoint names of a decoder (Hugging Face's, as every supported
  // family and Qwen3-MoE and gpt-oss write them).
  static constexpr const char* kEmbeddingName = "model.embed_tokens.weight";
  static constexpr const char* kLmHeadName = "lm_head.weight";
  static constexpr const char* kFinalNormName = "model.norm.weight";

  // Where a checkpoint keeps the head: a decoder's names, a multimodal
  // wrapper's (Qwen3.5/3.6, Qwen3-VL: model.language_model.*, lm_head.weight
  // at the top; Llama 4: language_model.model.*, language_model.lm_head.weight).
  struct Names {
    const char* embedding;
    const char* final_norm;
    const char* lm_head;
  };
  static const std::vector<Names>& naming_schemes();

  // config.json + only the head's tensors of `dir` (single model.safetensors
  // or sharded through model.safetensors.index.json), converted to `dtype`
  // (floating point) on `device` as TargetModel::load converts them. Without
  // the LM head a tied config uses the embedding; the final norm [H] is read
  // only when `with_final_norm`. The names are the first scheme whose
  // embedding the checkpoint holds. Throws naming the directory and the
  // tensor for one that is missing (every name tried, for the embedding) or
  // whose shape config.json contradicts.
  static TargetHead load(const std::filesystem::path& dir, torch::Device device = torch::kCPU,
                         torch::Dtype dtype = torch::kFloat32, bool with_final_norm = false);

  // Over tensors already loaded (shared, not copied); final_norm may be undefined.
  TargetHead(HeadConfig config, torch::Tensor embedding, torch::Tensor lm_head, torch::Tensor final_norm);

  const HeadConfig& config() const { return config_; }
  torch::Device device() const { return embedding_.device(); }
  torch::Dtype dtype() const { return embedding_.scalar_type(); }

  const torch::Tensor& embedding_weight() const { return embedding_; }    // [V, H]
  const torch::Tensor& lm_head_weight() const { return lm_head_; }        // [V, H]; the embedding itself when tied
  const torch::Tensor& final_norm_weight() const { return final_norm_; }  // [H]; undefined unless loaded
  // One tensor serves as embedding and LM head.
  bool tied() const { return lm_head_.is_same(embedding_); }
  // Bytes the head holds, a shared tensor counted once.
  uint64_t bytes() const;

 private:
  HeadConfig config_;
  torch::Tensor embedding_;
  torch::Tensor lm_head_;
  torch::Tensor final_norm_;
};

}  // namespace dflow::target
