// The frozen target LLM (Qwen3, Qwen2, Llama, Qwen3-MoE, gpt-oss, the
// Qwen3.5/3.6 text models dense and MoE), loaded from a Hugging Face
// checkpoint directory. Inference only: every call runs under NoGradGuard.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "target/documents.hpp"
#include "target/gated_deltanet.hpp"
#include "target/hf_config.hpp"
#include "target/layers.hpp"
#include "target/moe.hpp"
#include "target/target_head.hpp"

namespace dflow::target {

// Feature layer ids of the public DFlash code: n == 1 gives [L / 2];
// otherwise id_i = round(1 + i * (L - 4) / (n - 1)) with Python's
// round-half-to-even. 36 layers, n = 5 -> 1, 9, 17, 25, 33.
std::vector<int64_t> feature_layer_ids(int64_t num_target_layers, int64_t num_features);

// The public formula's ids, made to rise when it repeats a layer (very
// shallow targets: 4 layers, n = 3 -> 1, 1, 1 becomes 0, 1, 2), below the
// last layer unless every layer is a feature (target_load.cpp says why).
// With more features than layers a repeat cannot be avoided; the formula's
// ids are returned as they are.
std::vector<int64_t> distinct_feature_layer_ids(int64_t num_target_layers, int64_t num_features);

// The target's RMSNorm as its family computes it (config.norm): gpt-oss
// scales before the cast back to x's dtype, Qwen3.5/3.6 scale by 1 + weight
// before it, the other families scale after. A config dflow cannot run (an
// FP8 gpt-oss, a multimodal wrapper) still names its norm; throws for a norm
// dflow does not know (NormStyle::Unknown), never computing another's.
torch::Tensor family_rms_norm(const HFConfig& config, const torch::Tensor& x, const torch::Tensor& weight);

struct TargetLayerWeights {
  torch::Tensor input_layernorm, post_attention_layernorm;  // [H]
  torch::Tensor q_proj, k_proj, v_proj, o_proj;             // [out, in]; q_proj [2 q_width, H] with an output gate
  torch::Tensor q_bias, k_bias, v_bias, o_bias;             // undefined when absent
  torch::Tensor q_norm, k_norm;                             // [head_dim], undefined unless qk_norm
  torch::Tensor gate_proj, up_proj, down_proj;  // the dense MLP; undefined where `experts` are
  ExpertWeights experts;                         // routed experts (config.moe.sparse(layer))
  torch::Tensor sinks;                           // [heads], gpt-oss attention sinks; else undefined
  // Qwen3.5-MoE's shared expert beside the routed ones: sigmoid(x . shared_expert_gate) * its SwiGLU.
  torch::Tensor shared_gate_proj, shared_up_proj, shared_down_proj, shared_expert_gate;
  LinearAttentionWeights linear;  // a linear_attention layer's mixer (no q..o_proj then)
};

// Per-layer keys and values of the tokens seen so far (after k_norm and
// RoPE), preallocated to a capacity so appending never copies the past; for
// a target with linear-attention layers (Qwen3.5/3.6), each such layer's conv
// and recurrent state instead.
class KVCache {
 public:
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch_size() const { return batch_size_; }
  // Forget entries from `new_length` on (e.g. rejected speculative tokens).
  // A recurrent state cannot be cut like keys and values: with linear
  // layers, the states as they were before the last forward_cached call are
  // kept, and going back to a length within that call restores them and
  // feeds the call's first new_length - start tokens again at the start of
  // the next call (whose outputs are still only its own tokens'). Going back
  // before the last call's start throws.
  void truncate(int64_t new_length);
  // Bytes the linear-attention layers' conv and recurrent states hold (0 for
  // a target without them), each kept twice (the current state and the one
  // to go back to); the same at any length.
  int64_t linear_state_bytes() const;

 private:
  friend class TargetModel;
  bool has_linear_states() const;
  std::vector<torch::Tensor> keys_, values_;  // per layer [B, KVH, capacity, D]; undefined for linear layers
  std::vector<LinearAttentionState> linear_states_;  // per layer; undefined for full-attention layers
  // Linear layers: the states before the last call, its start and its
  // tokens [B, n]; and the tokens a truncation left to feed again.
  std::vector<LinearAttentionState> rollback_states_;
  int64_t rollback_length_ = -1;
  torch::Tensor rollback_tokens_, replay_tokens_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  int64_t batch_size_ = 0;
};

struct TargetOutput {
  std::vector<torch::Tensor> hidden_states;  // one per requested layer id, [B, S, H] (HF hidden_states[l + 1])
  torch::Tensor logits;                      // [B, S, V] when requested, else undefined
};

// Choices of how a target is held that do not change its outputs.
struct TargetLoadOptions {
  // model.target.mxfp4_experts: gpt-oss's MXFP4 experts kept packed (the
  // default: gpt-oss-120b fits one GPU) or dequantized on load (faster).
  Mxfp4Experts mxfp4_experts = Mxfp4Experts::resident;
};

// "resident" or "dequantize" (model.target.mxfp4_experts); throws otherwise.
Mxfp4Experts parse_mxfp4_experts(const std::string& value);

class TargetModel {
 public:
  // Loads config.json + *.safetensors and converts the weights to `dtype`
  // (float32, bfloat16, float16 or float64) on `device`.
  static TargetModel load(const std::filesystem::path& dir, torch::Device device = torch::kCPU,
                          torch::Dtype dtype = torch::kFloat32, const TargetLoadOptions& options = {});

  const HFConfig& config() const { return config_; }
  torch::Device device() const { return device_; }
  torch::Dtype dtype() const { return dtype_; }
  int64_t num_layers() const { return config_.num_hidden_layers; }

  // input_ids [B, S] int64, right-padded (padding after the real tokens, so
  // causal attention keeps real positions exact). Layer l's feature is HF's hidden_states[l + 1]:
  // the residual stream after decoder layer l; for the last layer, the final norm's output.
  TargetOutput forward(const torch::Tensor& input_ids, const std::vector<int64_t>& layer_ids,
                       bool want_logits) const;

  // Packed rows (target/documents.hpp): each token attends only to earlier
  // tokens of its own document, at RoPE positions documents.position_ids.
  // A sample's states equal those of the sample alone in a row.
  TargetOutput forward(const torch::Tensor& input_ids, const PackedDocuments& documents,
                       const std::vector<int64_t>& layer_ids, bool want_logits) const;

  // cat(features of layer_ids, -1): [B, S, n * H].
  torch::Tensor context_features(const torch::Tensor& input_ids, const std::vector<int64_t>& layer_ids) const;
  torch::Tensor context_features(const torch::Tensor& input_ids, const PackedDocuments& documents,
                                 const std::vector<int64_t>& layer_ids) const;

  // Incremental decoding: prefill, then one or more tokens per call; logits
  // equal those of a full forward over the whole sequence.
  KVCache new_cache(int64_t batch_size, int64_t capacity_tokens) const;
  TargetOutput forward_cached(KVCache& cache, const torch::Tensor& new_input_ids,
                              const std::vector<int64_t>& layer_ids, bool want_logits) const;

  // Frozen embedding and LM head (the drafter uses both).
  torch::Tensor embed(const torch::Tensor& input_ids) const;  // [..] -> [.., H]
  torch::Tensor lm_head(const torch::Tensor& hidden) const;   // [.., H] -> [.., V]
  const torch::Tensor& embedding_weight() const { return embed_tokens_; }  // [V, H]
  const torch::Tensor& lm_head_weight() const { return lm_head_; }         // [V, H]
  // Bytes the routed experts' projections hold, over all layers (0 for a
  // dense target): packed MXFP4 or dequantized, as loaded.
  int64_t expert_projection_bytes() const;
  // The embedding, LM head and final norm as a TargetHead over these very
  // tensors (no copy): a run that loads the whole target holds one head.
  TargetHead head() const;

  // Generates up to max_new_tokens after the prompt (greedy when
  // temperature <= 0, else softmax(logits / temperature) sampling with a
  // CPU generator seeded by `seed`). Stops after emitting an eos id.
  // Returns the new tokens only.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens,
                                double temperature, uint64_t seed,
                                const std::vector<int64_t>& eos_token_ids) const;

  // The same generation, also returning the hidden states of `layer_ids` that
  // its forward passes computed (the prefill and each decode step), plus one
  // more step that feeds the last token (generation itself never needs its
  // states): features [P + tokens, n * H] = cat(layer_ids, -1) at every
  // position of prompt + new tokens, on the target's device in its dtype;
  // undefined when layer_ids is empty. The tokens are exactly generate()'s.
  struct Generation {
    std::vector<int64_t> tokens;
    torch::Tensor features;
  };
  Generation generate_with_features(const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens, double temperature,
                                    uint64_t seed, const std::vector<int64_t>& eos_token_ids,
                                    const std::vector<int64_t>& layer_ids) const;

 private:
  TargetOutput run(const torch::Tensor& input_ids, KVCache* cache, const std::vector<int64_t>& layer_ids,
                   bool want_logits, const PackedDocuments* documents = nullptr) const;
  torch::Tensor decoder_layer(int64_t layer_index, const torch::Tensor& hidden, const RotaryTables& rotary,
                              KVCache* cache, int64_t cache_start,
                              const DocumentAttention* documents = nullptr) const;

  HFConfig config_;
  torch::Device device_ = torch::kCPU;
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Tensor embed_tokens_;  // [V, H]
  torch::Tensor final_norm_;    // [H]
  torch::Tensor lm_head_;       // [V, H]; the embedding itself when tied
  std::vector<TargetLayerWeights> layers_;
  ExpertOptions expert_options_;  // from config_.moe, set by load()
};

}  // namespace dflow::target
