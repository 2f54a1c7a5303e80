// Target forward: full causal passes and incremental passes over a KV cache.
#include "target/target.hpp"

#include "target/gpt_oss_layers.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace dflow::model {

torch::Tensor family_rms_norm(const HFConfig& config, const torch::Tensor& x, const torch::Tensor& weight) {
  switch (config.norm) {
    case NormStyle::ScaleAfterCast: return rms_norm(x, weight, config.rms_norm_eps);
    case NormStyle::ScaleWide: return rms_norm_scaled_wide(x, weight, config.rms_norm_eps);
    // Qwen3_5RMSNorm: its stored weight is zero-centred, the scale 1 + weight in float32.
    case NormStyle::OnePlusWeight: return rms_norm_scaled_wide(x, weight.to(torch::kFloat32) + 1.0, config.rms_norm_eps);
    case NormStyle::Unknown: break;
  }
  std::string architectures;
  for (const auto& name : config.architectures) architectures += (architectures.empty() ? "" : ", ") + name;
  throw std::invalid_argument("the final norm of model_type '" + config.model_type + "' (architectures [" +
                              architectures + "]) is not one dflow knows: it cannot apply it (the kl teacher needs it)");
}

void KVCache::truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length_) {
    throw std::out_of_range("KVCache::truncate: new length " + std::to_string(new_length) +
                            " outside [0, " + std::to_string(length_) + "]");
  }
  length_ = new_length;
}

torch::Tensor TargetModel::embed(const torch::Tensor& input_ids) const {
  torch::NoGradGuard no_grad;
  return torch::embedding(embed_tokens_, input_ids.to(device_));
}

torch::Tensor TargetModel::lm_head(const torch::Tensor& hidden) const {
  return at::linear(hidden.to(lm_head_.scalar_type()), lm_head_);
}

KVCache TargetModel::new_cache(int64_t batch_size, int64_t capacity_tokens) const {
  KVCache cache;
  cache.batch_size_ = batch_size;
  cache.capacity_ = capacity_tokens;
  const auto options = torch::TensorOptions().device(device_).dtype(dtype_);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    cache.keys_.push_back(torch::zeros({batch_size, config_.num_key_value_heads, capacity_tokens, config_.head_dim}, options));
    cache.values_.push_back(torch::zeros({batch_size, config_.num_key_value_heads, capacity_tokens, config_.head_dim}, options));
  }
  return cache;
}

torch::Tensor TargetModel::decoder_layer(int64_t layer_index, const torch::Tensor& hidden, const RotaryTables& rotary,
                                         KVCache* cache, int64_t cache_start,
                                         const DocumentAttention* documents) const {
  const TargetLayerWeights& w = layers_[static_cast<size_t>(layer_index)];
  const int64_t batch = hidden.size(0), length = hidden.size(1), head_dim = config_.head_dim;
  auto project_heads = [&](const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                           int64_t heads, const torch::Tensor& norm) {
    torch::Tensor projected = at::linear(x, weight, bias).view({batch, length, heads, head_dim});
    if (norm.defined()) projected = rms_norm(projected, norm, config_.rms_norm_eps);
    return projected.transpose(1, 2);  // [B, heads, S, D]
  };

  const torch::Tensor x = family_rms_norm(config_, hidden, w.input_layernorm);  // [B, S, H]
  const torch::Tensor q = apply_rotary(project_heads(x, w.q_proj, w.q_bias, config_.num_attention_heads, w.q_norm), rotary);
  torch::Tensor k = apply_rotary(project_heads(x, w.k_proj, w.k_bias, config_.num_key_value_heads, w.k_norm), rotary);
  torch::Tensor v = project_heads(x, w.v_proj, w.v_bias, config_.num_key_value_heads, torch::Tensor());
  // attended [B, heads, S, D] -> the layer's output: o_proj, residual, MLP.
  auto finish_layer = [&](const torch::Tensor& attended) {
    const torch::Tensor merged = attended.transpose(1, 2).reshape({batch, length, config_.num_attention_heads * head_dim});
    const torch::Tensor after_attention = hidden + at::linear(merged, w.o_proj, w.o_bias);
    const torch::Tensor y = family_rms_norm(config_, after_attention, w.post_attention_layernorm);
    return after_attention + (w.experts.defined() ? routed_experts(y, w.experts, expert_options_)
                                                   : swiglu_mlp(y, w.gate_proj, w.up_proj, w.down_proj));
  };

  std::optional<torch::Tensor> visible_mask;
  bool causal = length > 1;
  const int64_t total = cache_start + length;
  if (cache != nullptr) {
    cache->keys_[static_cast<size_t>(layer_index)].narrow(2, cache_start, length).copy_(k);
    cache->values_[static_cast<size_t>(layer_index)].narrow(2, cache_start, length).copy_(v);
    k = cache->keys_[static_cast<size_t>(layer_index)].narrow(2, 0, total);
    v = cache->values_[static_cast<size_t>(layer_index)].narrow(2, 0, total);
  }
  // gpt-oss: a sink per head in every softmax, and its sliding layers' window.
  if (w.sinks.defined()) {
    const int64_t window = config_.sliding_window(layer_index);
    const torch::Tensor attended = documents != nullptr ? document_sink_attention(q, k, v, w.sinks, *documents, window)
                                                        : causal_sink_attention(q, k, v, w.sinks, cache_start, window);
    return finish_layer(attended);
  }
  if (cache != nullptr) {
    if (cache_start > 0 && length > 1) {
      // SDPA's is_causal aligns the diagonal top-left; new queries sit at the
      // bottom right of the key range, so say it explicitly: key j <= start + i.
      const auto options = torch::TensorOptions().device(device_).dtype(torch::kInt64);
      visible_mask = torch::arange(total, options).unsqueeze(0) <=
                     (torch::arange(length, options) + cache_start).unsqueeze(1);  // [S, total]
      causal = false;
    }
    if (cache_start > 0 && length == 1) causal = false;  // one new query sees everything cached
  }
  const torch::Tensor attended = documents != nullptr ? document_causal_attention(q, k, v, *documents)
                                                     : grouped_attention(q, k, v, visible_mask, causal);  // [B, heads, S, D]
  return finish_layer(attended);
}

TargetOutput TargetModel::run(const torch::Tensor& input_ids, KVCache* cache, const std::vector<int64_t>& layer_ids,
                              bool want_logits, const PackedDocuments* documents) const {
  torch::NoGradGuard no_grad;
  if (input_ids.dim() != 2 || input_ids.scalar_type() != torch::kInt64) {
    throw std::invalid_argument("TargetModel: input_ids must be int64 [B, S], got " +
                                std::string(c10::toString(input_ids.scalar_type())) + " " + c10::str(input_ids.sizes()));
  }
  for (const int64_t id : layer_ids) {
    if (id < 0 || id >= config_.num_hidden_layers) {
      throw std::out_of_range("TargetModel: feature layer id " + std::to_string(id) + " outside [0, " +
                              std::to_string(config_.num_hidden_layers) + ")");
    }
  }
  const int64_t length = input_ids.size(1);
  const int64_t start = cache != nullptr ? cache->length_ : 0;
  if (cache != nullptr && (input_ids.size(0) != cache->batch_size_ || start + length > cache->capacity_)) {
    throw std::out_of_range("TargetModel: KV cache of batch " + std::to_string(cache->batch_size_) + " and capacity " +
                            std::to_string(cache->capacity_) + " cannot take " + c10::str(input_ids.sizes()) +
                            " tokens after " + std::to_string(start));
  }
  std::optional<DocumentAttention> document_attention;
  torch::Tensor positions;
  if (documents != nullptr) {
    if (cache != nullptr || documents->position_ids.sizes() != input_ids.sizes() ||
        documents->document_ids.sizes() != input_ids.sizes()) {
      throw std::invalid_argument("TargetModel: packed documents need position_ids and document_ids shaped like "
                                  "input_ids " + c10::str(input_ids.sizes()) + " and no KV cache, got " +
                                  c10::str(documents->position_ids.sizes()) + " and " +
                                  c10::str(documents->document_ids.sizes()));
    }
    positions = documents->position_ids.to(device_, torch::kInt64);  // [B, S]: restart at 0 per document
    document_attention = prepare_document_attention(documents->document_ids, device_, dtype_);
  } else {
    positions = torch::arange(start, start + length, torch::TensorOptions().device(device_).dtype(torch::kInt64));
  }
  const RotaryTables rotary =
      scaled_rotary_tables(positions, config_.head_dim, config_.rope_theta, config_.rope_scaling, dtype_);

  // Without logits and without a cache (which needs every layer), stop at the deepest requested layer.
  int64_t last_layer = config_.num_hidden_layers - 1;
  if (!want_logits && cache == nullptr) {
    last_layer = layer_ids.empty() ? -1 : *std::max_element(layer_ids.begin(), layer_ids.end());
  }
  TargetOutput output;
  output.hidden_states.resize(layer_ids.size());
  torch::Tensor hidden = torch::embedding(embed_tokens_, input_ids.to(device_));  // [B, S, H]
  for (int64_t layer = 0; layer <= last_layer; ++layer) {
    hidden = decoder_layer(layer, hidden, rotary, cache, start, document_attention ? &*document_attention : nullptr);
    // As Hugging Face's hidden_states[L], which the serving code reads as the
    // last layer's feature: the last layer's output is the final norm's.
    if (layer == config_.num_hidden_layers - 1) hidden = family_rms_norm(config_, hidden, final_norm_);
    for (size_t i = 0; i < layer_ids.size(); ++i) {
      if (layer_ids[i] == layer) output.hidden_states[i] = hidden;
    }
  }
  if (cache != nullptr) cache->length_ = start + length;
  if (want_logits) output.logits = at::linear(hidden, lm_head_);  // every layer ran: `hidden` is normed
  return output;
}

TargetOutput TargetModel::forward(const torch::Tensor& input_ids, const std::vector<int64_t>& layer_ids,
                                  bool want_logits) const {
  return run(input_ids, nullptr, layer_ids, want_logits);
}

TargetOutput TargetModel::forward_cached(KVCache& cache, const torch::Tensor& new_input_ids,
                                         const std::vector<int64_t>& layer_ids, bool want_logits) const {
  return run(new_input_ids, &cache, layer_ids, want_logits);
}

TargetOutput TargetModel::forward(const torch::Tensor& input_ids, const PackedDocuments& documents,
                                  const std::vector<int64_t>& layer_ids, bool want_logits) const {
  return run(input_ids, nullptr, layer_ids, want_logits, &documents);
}

torch::Tensor TargetModel::context_features(const torch::Tensor& input_ids, const PackedDocuments& documents,
                                            const std::vector<int64_t>& layer_ids) const {
  if (layer_ids.empty()) throw std::invalid_argument("TargetModel::context_features: no layer ids");
  return torch::cat(forward(input_ids, documents, layer_ids, /*want_logits=*/false).hidden_states, -1);
}

torch::Tensor TargetModel::context_features(const torch::Tensor& input_ids, const std::vector<int64_t>& layer_ids) const {
  if (layer_ids.empty()) throw std::invalid_argument("TargetModel::context_features: no layer ids");
  return torch::cat(forward(input_ids, layer_ids, /*want_logits=*/false).hidden_states, -1);  // [B, S, n*H]
}

}  // namespace dflow::model
