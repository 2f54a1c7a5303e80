// Qwen3MoeForCausalLM's config.json: routed experts with softmax top-k gating.
#include "model/hf_config_families.hpp"

namespace dflow::model::config_parse {

void read_qwen3_moe_family(const nlohmann::json& /*json*/, HFConfig& /*config*/, const std::string& source) {
  throw config_error(source, "qwen3_moe (Qwen3MoeForCausalLM) targets are not implemented yet");
}

}  // namespace dflow::model::config_parse
