// GptOssForCausalLM's config.json: sinks, sliding layers, YaRN, MXFP4 experts.
#include "model/hf_config_families.hpp"

namespace dflow::model::config_parse {

void read_gpt_oss_family(const nlohmann::json& /*json*/, HFConfig& /*config*/, const std::string& source) {
  throw config_error(source, "gpt_oss (GptOssForCausalLM) targets are not implemented yet");
}

}  // namespace dflow::model::config_parse
