// Expert weights of the mixture-of-experts families, in target/moe.hpp's layout.
#include <stdexcept>

#include "target/target_load_families.hpp"

namespace dflow::target {

ExpertOptions expert_options(const HFConfig& config) {
  ExpertOptions options;
  if (config.moe.num_experts == 0) return options;
  options.top_k = config.moe.experts_per_token;
  options.normalize_top_k = config.moe.norm_topk_prob;
  if (config.family == ModelFamily::GptOss) {
    options.router = ExpertRouter::top_k_then_softmax;
    options.activation = ExpertActivation::clamped_swiglu;
    options.swiglu_alpha = config.moe.swiglu_alpha;
    options.swiglu_limit = config.moe.swiglu_limit;
  }
  return options;
}

}  // namespace dflow::target
