// Qwen3-MoE's experts: the router mlp.gate.weight [E, H] and, per expert,
// mlp.experts.<e>.{gate,up,down}_proj.weight (what the published checkpoints
// hold and what transformers' save_pretrained writes), stacked into
// target/moe.hpp's layout. transformers' in-memory fused form
// (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]) is
// the same layout and is taken as it is.
#include <stdexcept>
#include <vector>

#include "target/target_load_families.hpp"

namespace dflow::target {

ExpertWeights load_qwen3_moe_experts(const WeightSource& source, const std::string& prefix, const HFConfig& config) {
  const int64_t experts = config.moe.num_experts;
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.moe.expert_intermediate_size;
  ExpertWeights w;
  w.router = source.take(prefix + "gate.weight", {experts, hidden});
  const std::string fused_gate_up = prefix + "experts.gate_up_proj", fused_down = prefix + "experts.down_proj";
  const std::string first_expert = prefix + "experts.0.gate_proj.weight";
  if (source.has(fused_gate_up) || source.has(fused_down)) {
    if (source.has(first_expert)) {
      throw std::runtime_error("target checkpoint has both '" + fused_gate_up + "' and '" + first_expert +
                               "': one layout per layer, please");
    }
    w.gate_up = source.take(fused_gate_up, {experts, 2 * inter, hidden});
    w.down = source.take(fused_down, {experts, hidden, inter});
    return w;
  }
  // One expert at a time into the stacked tensors, so that the peak is one
  // layer's experts, not two copies of them.
  for (int64_t e = 0; e < experts; ++e) {
    const std::string expert = prefix + "experts." + std::to_string(e) + ".";
    torch::Tensor gate = source.take(expert + "gate_proj.weight", {inter, hidden});
    torch::Tensor up = source.take(expert + "up_proj.weight", {inter, hidden});
    torch::Tensor down = source.take(expert + "down_proj.weight", {hidden, inter});
    if (e == 0) {
      w.gate_up = torch::empty({experts, 2 * inter, hidden}, gate.options());
      w.down = torch::empty({experts, hidden, inter}, down.options());
    }
    w.gate_up[e].narrow(0, 0, inter).copy_(gate);
    w.gate_up[e].narrow(0, inter, inter).copy_(up);
    w.down[e].copy_(down);
  }
  const std::string beyond = prefix + "experts." + std::to_string(experts) + ".gate_proj.weight";
  if (source.has(beyond)) {
    throw std::runtime_error("target checkpoint has tensor '" + beyond + "' but config.json says num_experts " +
                             std::to_string(experts));
  }
  return w;
}

}  // namespace dflow::target
