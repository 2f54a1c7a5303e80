// gpt-oss's experts: router weight and bias, fused gate_up_proj (bf16, or MXFP4 blocks and scales).
#include <stdexcept>

#include "model/target_load_families.hpp"

namespace dflow::model {

ExpertWeights load_gpt_oss_experts(const WeightSource& /*source*/, const std::string& prefix,
                                   const HFConfig& /*config*/) {
  throw std::logic_error("gpt_oss experts (" + prefix + ") are not loaded yet");
}

}  // namespace dflow::model
