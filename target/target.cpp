// Target forward: full causal passes and incremental passes over a KV cache.
#include "target/target.hpp"

#include "target/gpt_oss_layers.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace dflow::target {

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

bool KVCache::has_linear_states() const {
  return std::any_of(linear_states_.begin(), linear_states_.end(),
                     [](const LinearAttentionState& state) { return state.recurrent.defined(); });
}

void KVCache::truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length_) {
    throw std::out_of_range("KVCache::truncate: new length " + std::to_string(new_length) +
                            " outside [0, " + std::to_string(length_) + "]");
  }
  if (new_length == length_ || !has_linear_states()) {
    length_ = new_length;
    return;
  }
  if (rollback_length_ < 0 || new_length < rollback_length_) {
    throw std::invalid_argument(
        "KVCache::truncate: cannot go back from " + std::to_string(length_) + " to " + std::to_string(new_length) +
        " tokens: the target's linear-attention (Gated DeltaNet) layers keep their recurrent state from before the "
        "last forward_cached call only (which started at " + std::to_string(rollback_length_) + ")");
  }
  // The states before the last call, and its accepted tokens to feed again.
  for (size_t l = 0; l < linear_states_.size(); ++l) {
    if (!linear_states_[l].recurrent.defined()) continue;
    linear_states_[l].conv.copy_(rollback_states_[l].conv);
    linear_states_[l].recurrent.copy_(rollback_states_[l].recurrent);
  }
  replay_tokens_ = new_length > rollback_length_ ? rollback_tokens_.narrow(1, 0, new_length - rollback_length_)
                                                 : torch::Tensor();
  length_ = new_length;
  rollback_length_ = -1;
}

int64_t KVCache::linear_state_bytes() const {
  int64_t bytes = 0;
  for (const LinearAttentionState& state : linear_states_)
    if (state.recurrent.defined()) bytes += 2 * state.bytes();
  return bytes;
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
    if (config_.linear_attention(i)) {
      cache.keys_.emplace_back(), cache.values_.emplace_back();
      cache.linear_states_.push_back(LinearAttentionState::zeros(batch_size, config_.linear, device_, dtype_));
      continue;
    }
    cache.keys_.push_back(torch::zeros({batch_size, config_.num_key_value_heads, capacity_tokens, config_.head_dim}, options));
    cache.values_.push_back(torch::zeros({batch_size, config_.num_key_value_heads, capacity_tokens, config_.head_dim}, options));
    cache.linear_states_.emplace_back();
  }
  return cache;
}

torch::Tensor TargetModel::decoder_layer(int64_t layer_index, const torch::Tensor& hidden, const RotaryTables& rotary,
                                         KVCache* cache, int64_t cache_start,
                                         const DocumentAttention* documents) const {
  const TargetLayerWeights& w = layers_[static_cast<size_t>(layer_index)];
  const int64_t batch = hidden.size(0), length = hidden.size(1), head_dim = config_.head_dim;
  auto project_heads = [&](const torch::Tensor& projected, int64_t heads, const torch::Tensor& norm) {
    torch::Tensor split = projected.view({batch, length, heads, head_dim});
    if (norm.defined()) split = family_rms_norm(config_, split, norm);  // Qwen3.5's q/k norms scale by 1 + weight
    return split.transpose(1, 2);  // [B, heads, S, D]
  };
  // RoPE over each head's first rotary_dim dims (all of them unless partial).
  auto rotate = [&](const torch::Tensor& x) {
    const int64_t rotated = config_.rotary_dim > 0 ? config_.rotary_dim : head_dim;
    if (rotated == head_dim) return apply_rotary(x, rotary);
    return torch::cat({apply_rotary(x.narrow(-1, 0, rotated), rotary), x.narrow(-1, rotated, head_dim - rotated)}, -1);
  };
  // The residual after the token mixer -> the layer's output: the MLP (dense,
  // routed experts, and Qwen3.5-MoE's gated shared expert) and its residual.
  auto mlp_block = [&](const torch::Tensor& after_attention) {
    const torch::Tensor y = family_rms_norm(config_, after_attention, w.post_attention_layernorm);
    if (!w.experts.defined()) return after_attention + swiglu_mlp(y, w.gate_proj, w.up_proj, w.down_proj);
    torch::Tensor mlp = routed_experts(y, w.experts, expert_options_);
    if (w.shared_expert_gate.defined()) {
      mlp = mlp + torch::sigmoid(at::linear(y, w.shared_expert_gate)) *
                      swiglu_mlp(y, w.shared_gate_proj, w.shared_up_proj, w.shared_down_proj);
    }
    return after_attention + mlp;
  };

  const torch::Tensor x = family_rms_norm(config_, hidden, w.input_layernorm);  // [B, S, H]
  if (w.linear.defined()) {
    const double eps = config_.rms_norm_eps;
    if (documents == nullptr) {
      LinearAttentionState* state = cache != nullptr ? &cache->linear_states_[static_cast<size_t>(layer_index)] : nullptr;
      return mlp_block(hidden + gated_deltanet(x, w.linear, config_.linear, eps, state));
    }
    // Packed rows: each document's conv and recurrent state start from zeros
    // at its first token, as the document alone in a row.
    torch::Tensor mixed = torch::empty_like(hidden);
    for (const DocumentSpan& span : documents->spans) {
      mixed[span.row].narrow(0, span.start, span.length)
          .copy_(gated_deltanet(x[span.row].narrow(0, span.start, span.length).unsqueeze(0), w.linear,
                                config_.linear, eps, nullptr)[0]);
    }
    return mlp_block(hidden + mixed);
  }
  torch::Tensor q_projected = at::linear(x, w.q_proj, w.q_bias), gate;
  if (config_.attention_output_gate) {
    // Qwen3_5Attention: per head, head_dim query dims then head_dim gate dims.
    const auto per_head = q_projected.view({batch, length, config_.num_attention_heads, 2 * head_dim});
    gate = per_head.narrow(-1, head_dim, head_dim).reshape({batch, length, config_.num_attention_heads * head_dim});
    q_projected = per_head.narrow(-1, 0, head_dim).reshape({batch, length, config_.num_attention_heads * head_dim});
  }
  const torch::Tensor q = rotate(project_heads(q_projected, config_.num_attention_heads, w.q_norm));
  torch::Tensor k = rotate(project_heads(at::linear(x, w.k_proj, w.k_bias), config_.num_key_value_heads, w.k_norm));
  torch::Tensor v = project_heads(at::linear(x, w.v_proj, w.v_bias), config_.num_key_value_heads, torch::Tensor());
  // attended [B, heads, S, D] -> the layer's output: (gate,) o_proj, residual, MLP.
  auto finish_layer = [&](const torch::Tensor& attended) {
    torch::Tensor merged = attended.transpose(1, 2).reshape({batch, length, config_.num_attention_heads * head_dim});
    if (gate.defined()) merged = merged * torch::sigmoid(gate);
    return mlp_block(hidden + at::linear(merged, w.o_proj, w.o_bias));
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
      scaled_rotary_tables(positions, config_.rotary_dim > 0 ? config_.rotary_dim : config_.head_dim,
                           config_.rope_theta, config_.rope_scaling, dtype_);

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
  if (!cache.has_linear_states()) return run(new_input_ids, &cache, layer_ids, want_logits);
  // Linear layers: first the tokens a truncation left to feed again; the
  // states before this call kept for the next truncation.
  torch::NoGradGuard no_grad;
  torch::Tensor input_ids = new_input_ids;
  int64_t replayed = 0;
  if (cache.replay_tokens_.defined()) {
    replayed = cache.replay_tokens_.size(1);
    input_ids = torch::cat({cache.replay_tokens_.to(new_input_ids.device()), new_input_ids}, 1);
    cache.replay_tokens_ = torch::Tensor();
    cache.length_ -= replayed;
  }
  cache.rollback_states_.resize(cache.linear_states_.size());
  for (size_t l = 0; l < cache.linear_states_.size(); ++l) {
    const LinearAttentionState& state = cache.linear_states_[l];
    if (!state.recurrent.defined()) continue;
    LinearAttentionState& kept = cache.rollback_states_[l];
    if (!kept.recurrent.defined()) kept = {torch::empty_like(state.conv), torch::empty_like(state.recurrent)};
    kept.conv.copy_(state.conv);
    kept.recurrent.copy_(state.recurrent);
  }
  cache.rollback_length_ = cache.length_;
  cache.rollback_tokens_ = input_ids;
  TargetOutput output = run(input_ids, &cache, layer_ids, want_logits);
  if (replayed > 0) {
    const int64_t length = new_input_ids.size(1);
    for (torch::Tensor& hidden : output.hidden_states) hidden = hidden.narrow(1, replayed, length);
    if (output.logits.defined()) output.logits = output.logits.narrow(1, replayed, length);
  }
  return output;
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

}  // namespace dflow::target
