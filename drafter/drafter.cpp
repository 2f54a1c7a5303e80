// DFlash drafter modules and forward pass.
#include "drafter/drafter.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "drafter/activation_probe.hpp"
#include "drafter/kind.hpp"

#include <functional>
#include <stdexcept>

namespace dflow::drafter {

namespace {

torch::nn::Linear make_linear(int64_t in_features, int64_t out_features, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias));
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

DraftAttentionImpl::DraftAttentionImpl(const DrafterSpec& spec, int64_t layer)
    : num_heads_(spec.num_attention_heads),
      num_kv_heads_(spec.num_key_value_heads),
      head_dim_(spec.head_dim),
      sliding_window_(spec.layer_window(layer)) {
  const int64_t hidden = spec.hidden_size;
  q_proj = register_module("q_proj", make_linear(hidden, num_heads_ * head_dim_, spec.attention_bias));
  k_proj = register_module("k_proj", make_linear(hidden, num_kv_heads_ * head_dim_, spec.attention_bias));
  v_proj = register_module("v_proj", make_linear(hidden, num_kv_heads_ * head_dim_, spec.attention_bias));
  o_proj = register_module("o_proj", make_linear(num_heads_ * head_dim_, hidden, spec.attention_bias));
  q_norm = register_module("q_norm", RMSNorm(head_dim_, spec.rms_norm_eps));
  k_norm = register_module("k_norm", RMSNorm(head_dim_, spec.rms_norm_eps));
}

torch::Tensor DraftAttentionImpl::split_heads(const torch::Tensor& x, int64_t heads) const {
  return x.view({x.size(0), x.size(1), heads, head_dim_}).transpose(1, 2);
}

ContextKV DraftAttentionImpl::project_context(const torch::Tensor& context,
                                              const target::RotaryTables& context_rotary) {
  // The context enters only through k_proj / k_norm / v_proj: no
  // input_layernorm, no queries, no o_proj, no MLP.
  ContextKV kv;
  kv.keys = target::apply_rotary(k_norm(split_heads(k_proj(context), num_kv_heads_)), context_rotary);
  kv.values = split_heads(v_proj(context), num_kv_heads_);
  return kv;
}

torch::Tensor DraftAttentionImpl::forward(const torch::Tensor& x, const ContextKV& context_kv,
                                          const target::RotaryTables& draft_rotary, const BlockAttentionPlan& plan) {
  const torch::Tensor q =
      target::apply_rotary(q_norm(split_heads(q_proj(x), num_heads_)), draft_rotary);  // [B, H, Q, D]
  const torch::Tensor draft_k =
      target::apply_rotary(k_norm(split_heads(k_proj(x), num_kv_heads_)), draft_rotary);  // [B, KVH, Q, D]
  const torch::Tensor draft_v = split_heads(v_proj(x), num_kv_heads_);
  const torch::Tensor attended =
      block_attention(q, draft_k, draft_v, context_kv.keys, context_kv.values, plan, sliding_window_);
  return o_proj(attended.transpose(1, 2).reshape({x.size(0), x.size(1), num_heads_ * head_dim_}));
}

DraftMLPImpl::DraftMLPImpl(const DrafterSpec& spec) {
  gate_proj = register_module("gate_proj", make_linear(spec.hidden_size, spec.intermediate_size, false));
  up_proj = register_module("up_proj", make_linear(spec.hidden_size, spec.intermediate_size, false));
  down_proj = register_module("down_proj", make_linear(spec.intermediate_size, spec.hidden_size, false));
}

torch::Tensor DraftMLPImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DraftLayerImpl::DraftLayerImpl(const DrafterSpec& spec, int64_t layer) : index(layer) {
  // Registration order fixes named_parameters() order, which seeds the init.
  self_attn = register_module("self_attn", DraftAttention(spec, layer));
  mlp = register_module("mlp", DraftMLP(spec));
  input_layernorm = register_module("input_layernorm", RMSNorm(spec.hidden_size, spec.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(spec.hidden_size, spec.rms_norm_eps));
}

torch::Tensor DraftLayerImpl::forward(const torch::Tensor& hidden, const ContextKV& context_kv,
                                      const target::RotaryTables& draft_rotary, const BlockAttentionPlan& plan) {
  using Sublayer = std::function<torch::Tensor(const torch::Tensor&)>;
  auto through_kind = [&](DraftSublayer which, const torch::Tensor& x, const Sublayer& run) {
    return kind != nullptr ? kind->sublayer(index, which, x, run) : run(x);
  };
  ActivationProbe* probe = ActivationProbe::current();
  const std::string at = probe != nullptr ? "layers." + std::to_string(index) + "." : std::string();
  const torch::Tensor attention =
      through_kind(DraftSublayer::attention, input_layernorm(hidden),
                   [&](const torch::Tensor& x) { return self_attn(x, context_kv, draft_rotary, plan); });
  const torch::Tensor after_attention = hidden + attention;
  const torch::Tensor mlp_out = through_kind(DraftSublayer::mlp, post_attention_layernorm(after_attention),
                                             [&](const torch::Tensor& x) {
                                               if (probe != nullptr)  // the gated product, recomputed to be seen
                                                 probe->record(at + "mlp (act(gate_proj) * up_proj)",
                                                               torch::silu(mlp->gate_proj(x)) * mlp->up_proj(x));
                                               return mlp(x);
                                             });
  const torch::Tensor out = after_attention + mlp_out;
  if (probe != nullptr) {
    probe->record(at + "self_attn (output)", attention);
    probe->record(at + "residual after self_attn", after_attention);
    probe->record(at + "mlp (output)", mlp_out);
    probe->record(at + "residual after mlp", out);
  }
  return out;
}

DFlashDrafterImpl::DFlashDrafterImpl(DrafterSpec spec, uint64_t init_seed) : spec_(std::move(spec)) {
  spec_.validate();
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < spec_.num_layers; ++i) layers->push_back(DraftLayer(spec_, i));
  fc = register_module("fc", make_linear(spec_.num_features() * spec_.hidden_size, spec_.hidden_size, false));
  hidden_norm = register_module("hidden_norm", RMSNorm(spec_.hidden_size, spec_.rms_norm_eps));
  norm = register_module("norm", RMSNorm(spec_.hidden_size, spec_.rms_norm_eps));
  // The kind's modules after the backbone's: registration order fixes
  // named_parameters() order, which seeds the init.
  kind_modules_ = drafter_kind(spec_.kind).add_modules(*this);
  for (size_t i = 0; i < layers->size(); ++i) layers->ptr<DraftLayerImpl>(i)->kind = kind_modules_.get();

  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(init_seed);
  for (auto& item : named_parameters(/*recurse=*/true)) {
    if (ends_with(item.key(), "norm.weight")) {
      item.value().fill_(1.0);
    } else if (ends_with(item.key(), ".bias")) {
      item.value().zero_();
    } else {
      item.value().normal_(0.0, 0.02, generator);
    }
  }
  kind_modules_->reset_parameters();
}

torch::Tensor DFlashDrafterImpl::project_features(const torch::Tensor& context_features) {
  const int64_t expected = spec_.num_features() * spec_.hidden_size;
  if (context_features.dim() != 3 || context_features.size(2) != expected) {
    throw std::invalid_argument("DFlashDrafter: context features must be [B, S, " + std::to_string(expected) +
                                "] (" + std::to_string(spec_.num_features()) + " target layers x hidden " +
                                std::to_string(spec_.hidden_size) + "), got " + c10::str(context_features.sizes()));
  }
  if (ActivationProbe::current() == nullptr)
    return hidden_norm(fc(context_features.to(fc->weight.scalar_type())));  // [B, S, H]
  probe_activation("the target's features (fc's input)", context_features);
  const torch::Tensor projected = fc(context_features.to(fc->weight.scalar_type()));
  probe_activation("fc (output)", projected);
  const torch::Tensor normed = hidden_norm(projected);
  probe_activation("hidden_norm (output)", normed);
  return normed;
}

std::vector<ContextKV> DFlashDrafterImpl::context_kv(const torch::Tensor& context, int64_t first_position) {
  return context_kv(context, torch::arange(first_position, first_position + context.size(1),
                                           torch::TensorOptions().device(context.device()).dtype(torch::kInt64)));
}

std::vector<ContextKV> DFlashDrafterImpl::context_kv(const torch::Tensor& context, const torch::Tensor& positions) {
  const target::RotaryTables rotary = target::rotary_tables(positions.to(context.device(), torch::kInt64),
                                                            spec_.head_dim, spec_.rope_theta, context.scalar_type());
  std::vector<ContextKV> per_layer;
  for (size_t i = 0; i < layers->size(); ++i) {
    per_layer.push_back(layers->ptr<DraftLayerImpl>(i)->self_attn->project_context(context, rotary));
  }
  return per_layer;
}

torch::Tensor DFlashDrafterImpl::forward(const torch::Tensor& context_features, const torch::Tensor& block_embeddings,
                                         const torch::Tensor& block_positions, const BlockAttentionPlan& plan,
                                         bool recompute_layers) {
  const torch::Tensor context = project_features(context_features);
  const torch::Tensor positions =
      torch::arange(context.size(1), torch::TensorOptions().device(context.device()).dtype(torch::kInt64));
  return run_layers(context, positions, block_embeddings, block_positions, plan, recompute_layers);
}

torch::Tensor DFlashDrafterImpl::forward(const torch::Tensor& context_features, const torch::Tensor& context_positions,
                                         const torch::Tensor& block_embeddings, const torch::Tensor& block_positions,
                                         const BlockAttentionPlan& plan, bool recompute_layers) {
  if (context_positions.dim() != 2 || context_positions.sizes() != context_features.sizes().slice(0, 2)) {
    throw std::invalid_argument("DFlashDrafter: context positions must be [B, S] like the context features " +
                                c10::str(context_features.sizes()) + ", got " + c10::str(context_positions.sizes()));
  }
  return run_layers(project_features(context_features), context_positions, block_embeddings, block_positions, plan,
                    recompute_layers);
}

torch::Tensor DFlashDrafterImpl::run_layers(const torch::Tensor& context, const torch::Tensor& context_positions,
                                            const torch::Tensor& block_embeddings,
                                            const torch::Tensor& block_positions, const BlockAttentionPlan& plan,
                                            bool recompute_layers) {
  if (!recompute_layers) {
    return forward_with_context_kv(context_kv(context, context_positions), block_embeddings, block_positions, plan);
  }
  check_blocks(block_embeddings, block_positions);
  const target::RotaryTables context_rotary = target::rotary_tables(
      context_positions.to(context.device(), torch::kInt64), spec_.head_dim, spec_.rope_theta, context.scalar_type());
  torch::Tensor hidden = block_embeddings.to(fc->weight.scalar_type());  // [B, Q, H]
  const target::RotaryTables draft_rotary = target::rotary_tables(block_positions.to(hidden.device()), spec_.head_dim,
                                                                  spec_.rope_theta, hidden.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    hidden = recomputed_layer(*layers->ptr<DraftLayerImpl>(i), hidden, context, context_rotary, draft_rotary, plan);
    hidden = kind_modules_->after_layer(static_cast<int64_t>(i), hidden);
  }
  return norm(hidden);
}

void DFlashDrafterImpl::check_blocks(const torch::Tensor& block_embeddings, const torch::Tensor& block_positions) const {
  if (block_embeddings.dim() != 3 || block_embeddings.size(2) != spec_.hidden_size ||
      block_positions.sizes() != block_embeddings.sizes().slice(0, 2)) {
    throw std::invalid_argument("DFlashDrafter: block embeddings must be [B, Q, " + std::to_string(spec_.hidden_size) +
                                "] with positions [B, Q], got " + c10::str(block_embeddings.sizes()) + " and " +
                                c10::str(block_positions.sizes()));
  }
}

torch::Tensor DFlashDrafterImpl::forward_with_context_kv(const std::vector<ContextKV>& context_kv_per_layer,
                                                         const torch::Tensor& block_embeddings,
                                                         const torch::Tensor& block_positions,
                                                         const BlockAttentionPlan& plan) {
  check_blocks(block_embeddings, block_positions);
  if (context_kv_per_layer.size() != layers->size()) {
    throw std::invalid_argument("DFlashDrafter: context K/V for " + std::to_string(context_kv_per_layer.size()) +
                                " layers, drafter has " + std::to_string(layers->size()));
  }
  torch::Tensor hidden = block_embeddings.to(fc->weight.scalar_type());  // [B, Q, H]
  const target::RotaryTables draft_rotary = target::rotary_tables(block_positions.to(hidden.device()), spec_.head_dim,
                                                                  spec_.rope_theta, hidden.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    hidden = layers->ptr<DraftLayerImpl>(i)->forward(hidden, context_kv_per_layer[i], draft_rotary, plan);
    hidden = kind_modules_->after_layer(static_cast<int64_t>(i), hidden);
  }
  probe_activation("block embeddings (layer 0's input)", block_embeddings);
  const torch::Tensor out = norm(hidden);
  probe_activation("norm (output)", out);
  return out;
}

}  // namespace dflow::drafter
