// The "echo" tiny target: a real Qwen3 forward pass whose weights are set so
// that its next token is a simple function of its history, which a drafter
// can learn from the target's hidden states (a random target's continuations
// are noise that no drafter predicts, so tau stays at 1).
//
// Layer 0 holds the mechanism. Its residual stream is laid out as
//   dim 0            a constant ("bias") in every embedding,
//   dims 1 .. m      the token's code (a random +-1 vector per token),
//   dims H-m .. H-1  empty at first; layer 0 writes the echoed code here.
// Every query and key comes from the bias dim alone, so attention scores
// depend on positions only; the key's RoPE phases are chosen so that every
// head peaks at a distance of exactly lag - 1 (the position whose token is
// echoed next). The values carry the code of the token looked at, and o_proj
// writes it into the last m dims, the only dims the LM head reads; the LM
// head maps code(y) to perm(y). So token[t + 1] = perm(token[t + 1 - lag]).
// Layers 1.. are random with small output projections: they perturb the
// hidden states without changing the greedy continuation.
//
// The mixture-of-experts architectures keep this: their experts' output
// projections are zero in layer 0 and small after it (the routing itself is
// random), like the dense MLP's. gpt-oss has no q/k norms, so its layer-0
// q_proj and k_proj carry the scale Qwen3's norms would give; its attention
// sinks in layer 0 are very negative (they absorb no attention), and layer 0
// is a sliding layer whose window must reach echo_lag back. Its YaRN rotary
// frequencies are the ones the key pattern is tuned to.
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <stdexcept>

#include "target/tiny_target_parts.hpp"

namespace dflow::target {

NamedTensorList echo_tiny_weights(const TinyTargetOptions& o, const HFConfig& /*config*/) {
  const int64_t hidden = o.hidden_size, head_dim = tiny::head_dim_of(o), half = head_dim / 2;
  const int64_t code_length = std::min(o.num_kv_heads * head_dim, (hidden - 2) / 2);
  if (code_length < 8 || head_dim % 2 != 0 || o.echo_lag < 2 || o.echo_lag > o.max_position_embeddings)
    throw std::invalid_argument("make_tiny_target: the echo pattern needs hidden_size >= 18, kv_heads x head_dim >= 8, "
                                "an even head_dim and 2 <= echo_lag <= max_position_embeddings");
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const tiny::Normal normal = [&](std::vector<int64_t> shape, double std_dev) {
    return torch::empty(shape, torch::kFloat32).normal_(0.0, std_dev, generator);
  };
  // Output projections: unit normals scaled, as this pattern has always
  // drawn them (the same seed gives the same bytes as before MoE existed).
  const tiny::Normal unit_normal_scaled = [&](std::vector<int64_t> shape, double std_dev) {
    return normal(std::move(shape), 1.0) * std_dev;
  };
  const bool gpt_oss = o.arch == "gpt_oss";
  const int64_t text_vocab = o.vocab_size - 2;  // eos and mask are never echoed
  const int64_t echoed_first_dim = hidden - code_length;
  // As large as the code, so that input_layernorm leaves every dim at unit scale.
  const double bias = std::sqrt(static_cast<double>(code_length));
  constexpr double kPositionSharpness = 6.0;  // q/k norm weights: score gap >= ~9 to the next-best distance
  constexpr double kLogitScale = 0.5;         // correct token ~13 logits above the mean: low entropy when sampled
  constexpr double kPerturbation = 0.02;      // output projections of layers 1..
  constexpr double kSinkLogit = -1e4;         // gpt-oss layer 0: the sink takes no attention
  constexpr double kAttentionBiasStd = 0.02;  // gpt-oss layers 1..

  const torch::Tensor codes = torch::randint(0, 2, {o.vocab_size, code_length}, generator, torch::kInt64)
                                  .to(torch::kFloat32) * 2 - 1;  // [V, m] of +-1
  const torch::Tensor permutation = torch::randperm(text_vocab, generator, torch::kInt64);  // perm(y) = permutation[y]

  NamedTensorList tensors;
  const tiny::Sink add = [&](std::string name, torch::Tensor tensor) { tensors.emplace_back(std::move(name), std::move(tensor)); };
  torch::Tensor embedding = torch::zeros({o.vocab_size, hidden});
  embedding.select(1, 0).fill_(bias);
  embedding.narrow(1, 1, code_length).copy_(codes);
  add("model.embed_tokens.weight", embedding);

  // Positional attention: the query pair i sits at angle 0, the key pair i at
  // angle theta_i * (lag - 1), so q.k = sum_i cos(theta_i * (distance - lag + 1)).
  const std::vector<double> inverse_frequencies = tiny::rotary_inverse_frequencies(o);
  torch::Tensor query_pattern = torch::zeros({head_dim}), key_pattern = torch::zeros({head_dim});
  for (int64_t i = 0; i < half; ++i) {
    const double angle = inverse_frequencies[static_cast<size_t>(i)] * static_cast<double>(o.echo_lag - 1);
    query_pattern[i] = 1.0;
    key_pattern[i] = std::cos(angle);
    key_pattern[i + half] = std::sin(angle);
  }
  if (gpt_oss) {
    // What Qwen3's q/k norms of kPositionSharpness make of the patterns:
    // both have RMS 1/sqrt(2) per unit of the bias dim, which input_layernorm
    // leaves at bias / rms(embedding row).
    const double normed_bias =
        bias / std::sqrt((bias * bias + static_cast<double>(code_length)) / static_cast<double>(hidden) + 1e-5);
    const double scale = kPositionSharpness * std::sqrt(2.0) / normed_bias;
    query_pattern.mul_(scale);
    key_pattern.mul_(scale);
  }
  torch::Tensor q_proj = torch::zeros({o.num_heads * head_dim, hidden});
  for (int64_t h = 0; h < o.num_heads; ++h) q_proj.narrow(0, h * head_dim, head_dim).select(1, 0).copy_(query_pattern);
  torch::Tensor k_proj = torch::zeros({o.num_kv_heads * head_dim, hidden});
  torch::Tensor v_proj = torch::zeros({o.num_kv_heads * head_dim, hidden});
  torch::Tensor o_proj = torch::zeros({hidden, o.num_heads * head_dim});
  const int64_t heads_per_group = o.num_heads / o.num_kv_heads;
  for (int64_t g = 0; g < o.num_kv_heads; ++g) {
    k_proj.narrow(0, g * head_dim, head_dim).select(1, 0).copy_(key_pattern);
    for (int64_t j = 0; j < head_dim && g * head_dim + j < code_length; ++j) {
      const int64_t code_index = g * head_dim + j;
      v_proj[g * head_dim + j][1 + code_index] = 1.0;  // value = the looked-at token's code
      // The first query head of the group writes it into the echoed dims.
      o_proj[echoed_first_dim + code_index][g * heads_per_group * head_dim + j] = 1.0;
    }
  }

  const double fan_in_hidden = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    const bool echo_layer = i == 0;
    auto pick = [&](const torch::Tensor& echo, std::vector<int64_t> shape, double std_dev) {
      return echo_layer ? echo : normal(std::move(shape), std_dev);
    };
    add(prefix + "self_attn.q_proj.weight", pick(q_proj, {o.num_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.k_proj.weight", pick(k_proj, {o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.v_proj.weight", pick(v_proj, {o.num_kv_heads * head_dim, hidden}, fan_in_hidden));
    add(prefix + "self_attn.o_proj.weight", pick(o_proj, {hidden, o.num_heads * head_dim}, kPerturbation * fan_in_hidden));
    if (gpt_oss) {
      const double bias_std = echo_layer ? 0.0 : kAttentionBiasStd;
      add(prefix + "self_attn.q_proj.bias", normal({o.num_heads * head_dim}, bias_std));
      add(prefix + "self_attn.k_proj.bias", normal({o.num_kv_heads * head_dim}, bias_std));
      add(prefix + "self_attn.v_proj.bias", normal({o.num_kv_heads * head_dim}, bias_std));
      add(prefix + "self_attn.o_proj.bias", normal({hidden}, kPerturbation * bias_std));
      add(prefix + "self_attn.sinks", echo_layer ? torch::full({o.num_heads}, kSinkLogit) : normal({o.num_heads}, 1.0));
    } else {
      const double qk_norm = echo_layer ? kPositionSharpness : 1.0;
      add(prefix + "self_attn.q_norm.weight", torch::full({head_dim}, qk_norm));
      add(prefix + "self_attn.k_norm.weight", torch::full({head_dim}, qk_norm));
    }
    add(prefix + "input_layernorm.weight", torch::ones({hidden}));
    add(prefix + "post_attention_layernorm.weight", torch::ones({hidden}));
    tiny::add_mlp(o, i, prefix, normal, unit_normal_scaled, echo_layer ? 0.0 : kPerturbation, add);
  }
  add("model.norm.weight", torch::ones({hidden}));
  // Row perm(y) reads code(y) from the echoed dims; eos and mask rows stay 0.
  torch::Tensor lm_head = torch::zeros({o.vocab_size, hidden});
  lm_head.narrow(1, echoed_first_dim, code_length).index_copy_(0, permutation, codes.narrow(0, 0, text_vocab) * kLogitScale);
  add("lm_head.weight", lm_head);
  return tensors;
}

}  // namespace dflow::target
