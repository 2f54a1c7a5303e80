// gpt-oss's experts as transformers' GptOssMLP holds them: router.weight
// [E, H] and router.bias [E]; experts.gate_up_proj [E, H, 2I] with the gate
// and up columns interleaved (gate = [..., ::2], up = [..., 1::2]) and its
// bias [E, 2I] likewise; experts.down_proj [E, I, H] and its bias [E, H].
// The published checkpoints store the two projections as MXFP4
// (*_blocks / *_scales, rows in [out, in] orientation), dequantized here or
// kept packed (Mxfp4Experts::resident). All go into target/moe.hpp's layout:
// gate_up [E, 2I, H] gate rows first, down [E, H, I]; packed, the same rows
// in the same order (the gate/up de-interleave moves whole rows of blocks and
// scales, exact since MXFP4 blocks run along the input axis).
#include <functional>
#include <stdexcept>

#include "target/mxfp4.hpp"
#include "target/target_load_families.hpp"

namespace dflow::target {

namespace {

// Rows (axis `axis`) interleaved gate, up, gate, up ... -> gates, then ups.
torch::Tensor gates_then_ups(const torch::Tensor& interleaved, int64_t axis) {
  const int64_t rows = interleaved.size(axis);
  return torch::cat({interleaved.slice(axis, 0, rows, 2), interleaved.slice(axis, 1, rows, 2)}, axis).contiguous();
}

// An [E, out, in] projection with its rows in the order `rows` puts them:
// MXFP4 when the checkpoint has its blocks (into `packed_blocks` /
// `packed_scales`, uint8 on the device, when resident; else dequantized and
// returned), or the plain [E, in, out] parameter transformers'
// save_pretrained writes.
torch::Tensor projection(const WeightSource& source, const std::string& name, int64_t experts, int64_t out,
                         int64_t in, Mxfp4Experts mode, const std::function<torch::Tensor(const torch::Tensor&)>& rows,
                         torch::Tensor& packed_blocks, torch::Tensor& packed_scales) {
  if (source.has(name + "_blocks")) {
    if (in % 32 != 0) {
      throw std::runtime_error("target checkpoint: '" + name + "_blocks' would pack " + std::to_string(in) +
                               " inputs in blocks of 32, which does not divide them");
    }
    const torch::Tensor blocks = rows(source.raw(name + "_blocks", {experts, out, in / 32, 16}, torch::kUInt8));
    const torch::Tensor scales = rows(source.raw(name + "_scales", {experts, out, in / 32}, torch::kUInt8));
    if (mode == Mxfp4Experts::resident) {
      packed_blocks = blocks.to(source.device()).contiguous();
      packed_scales = scales.to(source.device()).contiguous();
      return {};
    }
    return mxfp4_dequantize(blocks, scales, source.device(), source.dtype());  // [E, out, in]
  }
  return rows(source.take(name, {experts, in, out}).transpose(1, 2)).contiguous();
}

}  // namespace

ExpertWeights load_gpt_oss_experts(const WeightSource& source, const std::string& prefix, const HFConfig& config,
                                   Mxfp4Experts mxfp4) {
  const int64_t experts = config.moe.num_experts, hidden = config.hidden_size;
  const int64_t inter = config.moe.expert_intermediate_size;
  const std::string gate_up = prefix + "experts.gate_up_proj", down = prefix + "experts.down_proj";
  if (!config.moe.mxfp4 && (source.has(gate_up + "_blocks") || source.has(down + "_blocks"))) {
    throw std::runtime_error("target checkpoint has MXFP4 tensor '" + gate_up +
                             "_blocks' but config.json has no quantization_config with quant_method mxfp4");
  }
  ExpertWeights w;
  w.router = source.take(prefix + "router.weight", {experts, hidden});
  w.router_bias = source.take(prefix + "router.bias", {experts});
  const auto de_interleave = [](const torch::Tensor& t) { return gates_then_ups(t, 1); };
  const auto as_stored = [](const torch::Tensor& t) { return t; };
  w.packed_dtype = source.dtype();
  w.gate_up = projection(source, gate_up, experts, 2 * inter, hidden, mxfp4, de_interleave, w.gate_up_blocks,
                         w.gate_up_scales);
  w.gate_up_bias = gates_then_ups(source.take(gate_up + "_bias", {experts, 2 * inter}), 1);
  w.down = projection(source, down, experts, hidden, inter, mxfp4, as_stored, w.down_blocks, w.down_scales);
  if (w.gate_up_blocks.defined() != w.down_blocks.defined()) {
    throw std::runtime_error("target checkpoint: '" + (w.down_blocks.defined() ? gate_up : down) +
                             "' is plain but the other projection of its layer is MXFP4; resident MXFP4 needs both");
  }
  w.down_bias = source.take(down + "_bias", {experts, hidden});
  return w;
}

}  // namespace dflow::target
