// Activation recomputation for draft layers (DrafterForwardOptions::
// recompute_layers): LibTorch's C++ API has no torch.utils.checkpoint, so a
// custom autograd function runs a layer (its context K/V projection
// included) without recording a graph in the forward pass, keeps only its
// inputs, and in the backward pass runs it again under grad mode and
// back-propagates through that second run. Same ops on the same inputs, so
// the same gradients; a layer's activations live only during its own
// backward instead of from the forward pass to the end of backward.
#include <torch/csrc/autograd/custom_function.h>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

namespace {

// What a layer's rerun needs besides its tensor inputs, owned by the
// autograd node (the plan and tables are gone by the time backward runs).
struct LayerRerun : torch::CustomClassHolder {
  DraftLayerImpl* layer = nullptr;
  target::RotaryTables context_rotary, draft_rotary;
  BlockAttentionPlan plan;
  bool hidden_needs_grad = false, context_needs_grad = false;

  torch::Tensor run(const torch::Tensor& hidden, const torch::Tensor& context) const {
    const ContextKV kv = layer->self_attn->project_context(context, context_rotary);
    return layer->forward(hidden, kv, draft_rotary, plan);
  }
};

class RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
 public:
  // Tensor arguments (hidden, context, then the layer's parameters) are the
  // node's inputs, in that order; `rerun` is not one.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<LayerRerun> rerun,
                               const torch::Tensor& hidden, const torch::Tensor& context, at::TensorList parameters) {
    (void)parameters;  // inputs only so that their gradients flow back through this node
    torch::Tensor out = rerun->run(hidden, context);  // autograd is off here: nothing is kept
    ctx->save_for_backward({hidden, context});
    ctx->saved_data["rerun"] = c10::IValue::make_capsule(rerun);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto rerun = c10::static_intrusive_pointer_cast<LayerRerun>(ctx->saved_data["rerun"].toCapsule());
    torch::AutoGradMode grad_mode(true);
    const torch::Tensor hidden = saved[0].detach().requires_grad_(rerun->hidden_needs_grad);
    const torch::Tensor context = saved[1].detach().requires_grad_(rerun->context_needs_grad);
    const torch::Tensor out = rerun->run(hidden, context);
    std::vector<torch::Tensor> wrt;
    if (rerun->hidden_needs_grad) wrt.push_back(hidden);
    if (rerun->context_needs_grad) wrt.push_back(context);
    const std::vector<torch::Tensor> parameters = rerun->layer->parameters();
    for (const auto& p : parameters)
      if (p.requires_grad()) wrt.push_back(p);
    const auto grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    // One entry per forward argument: rerun (none), hidden, context, each parameter.
    torch::autograd::variable_list result{torch::Tensor()};
    size_t next = 0;
    result.push_back(rerun->hidden_needs_grad ? grads[next++] : torch::Tensor());
    result.push_back(rerun->context_needs_grad ? grads[next++] : torch::Tensor());
    for (const auto& p : parameters) result.push_back(p.requires_grad() ? grads[next++] : torch::Tensor());
    return result;
  }
};

}  // namespace

torch::Tensor recomputed_layer(DraftLayerImpl& layer, const torch::Tensor& hidden, const torch::Tensor& context,
                               const target::RotaryTables& context_rotary, const target::RotaryTables& draft_rotary,
                               const BlockAttentionPlan& plan) {
  auto rerun = c10::make_intrusive<LayerRerun>();
  rerun->layer = &layer;
  rerun->context_rotary = context_rotary;
  rerun->draft_rotary = draft_rotary;
  rerun->plan = plan;
  rerun->hidden_needs_grad = hidden.requires_grad();
  rerun->context_needs_grad = context.requires_grad();
  if (!torch::GradMode::is_enabled()) return rerun->run(hidden, context);
  const std::vector<torch::Tensor> parameters = layer.parameters();
  return RecomputedLayer::apply(rerun, hidden, context, at::TensorList(parameters));
}

}  // namespace dflow::drafter
