// The "random" tiny target: patternless but peaked continuations, for tests
// of the model code, and the presets' real shapes. Each tensor is handed on
// as soon as it is drawn (in the checkpoint's order), converted to the
// written dtype, so a bf16 model never exists in float32 as a whole (and,
// sharded, is written a shard at a time: a 30B-A3B preset's 61 GB included).
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <stdexcept>

#include "target/tiny_target_parts.hpp"

namespace dflow::target {

namespace tiny {

void add_mlp(const TinyTargetOptions& o, int64_t layer, const std::string& prefix, const Normal& normal,
             const Normal& output_normal, double output_scale, const Sink& add) {
  const int64_t hidden = o.hidden_size;
  const double fan_in_hidden = 1.0 / std::sqrt(static_cast<double>(hidden));
  auto fan_in = [](int64_t width) { return 1.0 / std::sqrt(static_cast<double>(width)); };
  // Input-side biases (gpt-oss): small, so the clamped SwiGLU stays in its linear-ish range.
  constexpr double kInputBiasStd = 0.02;
  if (!sparse_layer(o, layer)) {
    const int64_t inner = o.intermediate_size;
    add(prefix + "mlp.gate_proj.weight", normal({inner, hidden}, fan_in_hidden));
    add(prefix + "mlp.up_proj.weight", normal({inner, hidden}, fan_in_hidden));
    add(prefix + "mlp.down_proj.weight", output_normal({hidden, inner}, output_scale * fan_in(inner)));
    return;
  }
  // Qwen3MoeSparseMoeBlock as published, and Qwen3.5-MoE's as save_pretrained
  // writes it: one module per expert.
  if (o.arch == "qwen3_moe" || o.arch == "qwen3_5_moe") {
    const int64_t inner = o.moe_intermediate_size;
    add(prefix + "mlp.gate.weight", normal({o.num_experts, hidden}, fan_in_hidden));
    for (int64_t e = 0; e < o.num_experts; ++e) {
      const std::string expert = prefix + "mlp.experts." + std::to_string(e) + ".";
      add(expert + "gate_proj.weight", normal({inner, hidden}, fan_in_hidden));
      add(expert + "up_proj.weight", normal({inner, hidden}, fan_in_hidden));
      add(expert + "down_proj.weight", output_normal({hidden, inner}, output_scale * fan_in(inner)));
    }
    if (o.arch == "qwen3_5_moe") {  // beside the routed ones: a shared expert, gated by sigmoid(x . w)
      const int64_t shared = o.shared_expert_intermediate_size;
      add(prefix + "mlp.shared_expert.gate_proj.weight", normal({shared, hidden}, fan_in_hidden));
      add(prefix + "mlp.shared_expert.up_proj.weight", normal({shared, hidden}, fan_in_hidden));
      add(prefix + "mlp.shared_expert.down_proj.weight", output_normal({hidden, shared}, output_scale * fan_in(shared)));
      add(prefix + "mlp.shared_expert_gate.weight", normal({1, hidden}, fan_in_hidden));
    }
    return;
  }
  // gpt-oss: the router has a bias; the experts are stacked, gate_up_proj
  // [E, H, 2I] with gate and up interleaved along the last dim (gate the
  // even columns), down_proj [E, I, H], both with biases (x @ W + b).
  const int64_t inner = o.intermediate_size;
  add(prefix + "mlp.router.weight", normal({o.num_experts, hidden}, fan_in_hidden));
  add(prefix + "mlp.router.bias", normal({o.num_experts}, kInputBiasStd));
  const auto add_experts = [&](const std::string& name, const torch::Tensor& weight) {
    if (!o.mxfp4) return add(name, weight);
    auto [blocks, scales] = mxfp4_quantize(weight);
    add(name + "_blocks", blocks);
    add(name + "_scales", scales);
  };
  add_experts(prefix + "mlp.experts.gate_up_proj", normal({o.num_experts, hidden, 2 * inner}, fan_in_hidden));
  add(prefix + "mlp.experts.gate_up_proj_bias", normal({o.num_experts, 2 * inner}, kInputBiasStd));
  add_experts(prefix + "mlp.experts.down_proj", output_normal({o.num_experts, inner, hidden}, output_scale * fan_in(inner)));
  add(prefix + "mlp.experts.down_proj_bias", output_normal({o.num_experts, hidden}, output_scale * kInputBiasStd));
}

std::pair<torch::Tensor, torch::Tensor> mxfp4_quantize(const torch::Tensor& weight) {
  constexpr int64_t kBlock = 32;
  const int64_t experts = weight.size(0), in = weight.size(1), out = weight.size(2);
  if (in % kBlock != 0) throw std::invalid_argument("make_tiny_target: MXFP4 needs input widths that are multiples of 32");
  // Midpoints between the FP4 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: bucketize gives the nearest one's index.
  const torch::Tensor midpoints = torch::tensor({0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0}, torch::kFloat32);
  torch::Tensor blocks = torch::empty({experts, out, in / kBlock, kBlock / 2}, torch::kUInt8);
  torch::Tensor scales = torch::empty({experts, out, in / kBlock}, torch::kUInt8);
  for (int64_t e = 0; e < experts; ++e) {  // one expert at a time: the 20B preset's [32, 2880, 5760] stays small
    const torch::Tensor rows = weight[e].to(torch::kCPU, torch::kFloat32).t().contiguous().view({out, in / kBlock, kBlock});
    const torch::Tensor largest = rows.abs().amax(-1);  // [out, G]
    const torch::Tensor exponent =
        torch::where(largest > 0, torch::ceil(torch::log2(largest / 6.0)), torch::full_like(largest, -127.0))
            .clamp(-127.0, 127.0);
    const torch::Tensor scaled = rows / torch::exp2(exponent).unsqueeze(-1);
    const torch::Tensor code =
        torch::bucketize(scaled.abs(), midpoints).to(torch::kUInt8) + (scaled < 0).to(torch::kUInt8) * 8;
    using torch::indexing::Slice;
    blocks[e].copy_(code.index({"...", Slice(0, torch::indexing::None, 2)}) |
                    code.index({"...", Slice(1, torch::indexing::None, 2)}) * 16);
    scales[e].copy_((exponent + 127).to(torch::kUInt8));
  }
  return {blocks, scales};
}

}  // namespace tiny

namespace {

// The decoder layers of qwen3, qwen3_moe and gpt_oss. q/k norm weights of 2
// sharpen attention, so the next token depends on the history and not only
// on the current token (which alone locks greedy decoding into short
// cycles); gpt-oss has no q/k norms, so its q_proj is twice as large instead.
void add_attention_layers(const TinyTargetOptions& o, const tiny::Normal& normal, const tiny::Sink& add) {
  constexpr double kQKNormWeight = 2.0;
  constexpr double kAttentionBiasStd = 0.02;
  const bool gpt_oss = o.arch == "gpt_oss";
  const int64_t hidden = o.hidden_size, head_dim = tiny::head_dim_of(o);
  const double fan_in_hidden = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    const double q_std = gpt_oss ? kQKNormWeight * fan_in_hidden : fan_in_hidden;
    add(prefix + "self_attn.q_proj.weight", normal({o.num_heads * head_dim, hidden}, q_std));
    add(prefix + "self_attn.k_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.v_proj.weight", normal({o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.o_proj.weight", normal({hidden, o.num_heads * head_dim}, fan_in_hidden));
    if (gpt_oss) {
      add(prefix + "self_attn.q_proj.bias", normal({o.num_heads * head_dim}, kAttentionBiasStd));
      add(prefix + "self_attn.k_proj.bias", normal({o.num_kv_heads * head_dim}, kAttentionBiasStd));
      add(prefix + "self_attn.v_proj.bias", normal({o.num_kv_heads * head_dim}, kAttentionBiasStd));
      add(prefix + "self_attn.o_proj.bias", normal({hidden}, kAttentionBiasStd));
      add(prefix + "self_attn.sinks", normal({o.num_heads}, 1.0));  // a logit against scores of O(1)
    } else {
      add(prefix + "self_attn.q_norm.weight", torch::full({head_dim}, kQKNormWeight));
      add(prefix + "self_attn.k_norm.weight", torch::full({head_dim}, kQKNormWeight));
    }
    add(prefix + "input_layernorm.weight", torch::ones({hidden}));
    add(prefix + "post_attention_layernorm.weight", torch::ones({hidden}));
    tiny::add_mlp(o, i, prefix, normal, normal, 1.0, add);
  }
}

}  // namespace

void random_tiny_weights(const TinyTargetOptions& o, const HFConfig& /*config*/, const TensorSink& sink) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  if (o.generate_on.is_cuda()) torch::cuda::manual_seed_all(o.seed);
  const tiny::Normal normal = [&](std::vector<int64_t> shape, double std_dev) {
    if (o.generate_on.is_cuda()) return torch::empty(shape, torch::dtype(torch::kFloat32).device(o.generate_on)).normal_(0.0, std_dev);
    return torch::empty(shape, torch::kFloat32).normal_(0.0, std_dev, generator);
  };
  const tiny::Uniform uniform = [&](std::vector<int64_t> shape, double low, double high) {
    if (o.generate_on.is_cuda()) return torch::empty(shape, torch::dtype(torch::kFloat32).device(o.generate_on)).uniform_(low, high);
    return torch::empty(shape, torch::kFloat32).uniform_(low, high, generator);
  };
  const int64_t hidden = o.hidden_size;
  const double fan_in_hidden = 1.0 / std::sqrt(static_cast<double>(hidden));

  // Unit-variance embeddings and 1/sqrt(fan_in) projections keep every layer
  // contributing (add_attention_layers, tiny::add_qwen3_5_layers). The LM
  // head gives logits of std ~4 (top-1 probability ~0.5: confident,
  // learnable continuations) and leans away from each token's own
  // embedding, which the residual stream carries, so that a token rarely
  // predicts itself.
  constexpr double kLogitStd = 4.0;
  constexpr double kSelfRepeatPenalty = 0.5;
  const tiny::Sink add = [&](std::string name, const torch::Tensor& value) {  // MXFP4's uint8 stays uint8
    sink(std::move(name), value.is_floating_point() ? value.to(torch::kCPU, o.dtype) : value.to(torch::kCPU));
  };
  // Qwen3.5's wrappers keep the text model under model.language_model.
  const bool qwen3_5 = tiny::qwen3_5_arch(o);
  const std::string model = qwen3_5 ? "model.language_model." : "model.";
  const torch::Tensor embedding = normal({o.vocab_size, hidden}, 1.0);
  add(model + "embed_tokens.weight", embedding);
  if (qwen3_5) tiny::add_qwen3_5_layers(o, model, normal, uniform, add);
  else add_attention_layers(o, normal, add);
  add(model + "norm.weight", qwen3_5 ? torch::zeros({hidden}) : torch::ones({hidden}));  // Qwen3.5's: 1 + weight
  if (o.tie_word_embeddings) return;  // the embedding is the head (its logits are not peaked; fine for shapes)
  // (head - penalty * embedding / rms(embedding)) * logit scale, in place:
  // at 8B shapes each [V, H] float32 temporary is 2.5 GB.
  const torch::Tensor inverse_rms = torch::rsqrt(embedding.pow(2).mean(1, /*keepdim=*/true));  // [V, 1]
  torch::Tensor head = normal({o.vocab_size, hidden}, 1.0);
  head.addcmul_(embedding, inverse_rms, -kSelfRepeatPenalty).mul_(kLogitStd * fan_in_hidden);
  add("lm_head.weight", head);
}

}  // namespace dflow::target
