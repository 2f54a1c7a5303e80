// Qwen3-MoE's experts: mlp.gate.weight and mlp.experts.<e>.{gate,up,down}_proj.weight, stacked.
#include <stdexcept>

#include "model/target_load_families.hpp"

namespace dflow::model {

ExpertWeights load_qwen3_moe_experts(const WeightSource& /*source*/, const std::string& prefix,
                                     const HFConfig& /*config*/) {
  throw std::logic_error("qwen3_moe experts (" + prefix + ") are not loaded yet");
}

}  // namespace dflow::model
