// Qwen3.5/3.6's Gated DeltaNet layers as transformers 5.24's save_pretrained
// writes them (linear_attn.in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
// conv1d.weight [C, 1, kernel], dt_bias, A_log, norm.weight, out_proj), and
// the check that each layer holds the tensors of its layer_types entry.
#include <stdexcept>

#include "target/target_load_families.hpp"

namespace dflow::target {

LinearAttentionWeights load_linear_attention(const WeightSource& source, const std::string& prefix,
                                             const HFConfig& config) {
  const LinearAttentionConfig& c = config.linear;
  const int64_t hidden = config.hidden_size;
  LinearAttentionWeights w;
  w.in_proj_qkv = source.take(prefix + "in_proj_qkv.weight", {c.conv_dim(), hidden});
  w.in_proj_z = source.take(prefix + "in_proj_z.weight", {c.value_dim(), hidden});
  w.in_proj_b = source.take(prefix + "in_proj_b.weight", {c.num_value_heads, hidden});
  w.in_proj_a = source.take(prefix + "in_proj_a.weight", {c.num_value_heads, hidden});
  w.conv = source.take(prefix + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}).squeeze(1).contiguous();
  w.dt_bias = source.take(prefix + "dt_bias", {c.num_value_heads});
  w.A_log = source.take(prefix + "A_log", {c.num_value_heads});
  w.norm = source.take(prefix + "norm.weight", {c.value_head_dim});
  w.out_proj = source.take(prefix + "out_proj.weight", {hidden, c.value_dim()});
  return w;
}

void check_layer_kind(const WeightSource& source, const HFConfig& config, int64_t layer, const std::string& prefix) {
  if (config.layer_kinds.empty()) return;
  const bool linear = config.linear_attention(layer);
  const std::string other = prefix + (linear ? "self_attn.q_proj.weight" : "linear_attn.in_proj_qkv.weight");
  if (!source.has(other)) return;
  throw std::runtime_error("target checkpoint: layer " + std::to_string(layer) + " is '" +
                           (linear ? "linear_attention" : "full_attention") +
                           "' in config.json's layer_types, but the checkpoint holds '" + other + "' (a " +
                           (linear ? "full_attention" : "linear_attention") +
                           " layer's tensor): config.json and the weights disagree; use the config.json saved "
                           "with these weights");
}

}  // namespace dflow::target
