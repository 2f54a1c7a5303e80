// Loading a target from a Hugging Face checkpoint directory, checking every
// tensor's presence and shape against config.json.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "config/log.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/target_load_families.hpp"

namespace dflow::target {

std::vector<int64_t> feature_layer_ids(int64_t num_target_layers, int64_t num_features) {
  if (num_target_layers < 1 || num_features < 1) {
    throw std::invalid_argument("feature_layer_ids: need at least one target layer and one feature, got " +
                                std::to_string(num_target_layers) + " layers, " + std::to_string(num_features) +
                                " features");
  }
  if (num_features == 1) return {num_target_layers / 2};
  const double start = 1.0;
  const double end = static_cast<double>(num_target_layers - 3);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < num_features; ++i) {
    // nearbyint rounds half to even under the default rounding mode, like Python's round().
    const double id = std::nearbyint(start + static_cast<double>(i) * (end - start) / static_cast<double>(num_features - 1));
    ids.push_back(std::clamp<int64_t>(static_cast<int64_t>(id), 0, num_target_layers - 1));
  }
  return ids;
}

std::vector<int64_t> distinct_feature_layer_ids(int64_t num_target_layers, int64_t num_features) {
  std::vector<int64_t> ids = feature_layer_ids(num_target_layers, num_features);
  if (num_features > num_target_layers) return ids;
  for (size_t i = 1; i < ids.size(); ++i) ids[i] = std::max(ids[i], ids[i - 1] + 1);
  // The last layer only when every layer is needed: a speculators server
  // never hands it to the drafter (it is the verifier's own output).
  int64_t top = num_features < num_target_layers ? num_target_layers - 2 : num_target_layers - 1;
  for (size_t i = ids.size(); i-- > 0; --top) ids[i] = std::min(ids[i], top);
  return ids;
}


Mxfp4Experts parse_mxfp4_experts(const std::string& value) {
  if (value == "resident") return Mxfp4Experts::resident;
  if (value == "dequantize") return Mxfp4Experts::dequantize;
  throw std::invalid_argument("model.target.mxfp4_experts: '" + value + "' is neither resident nor dequantize");
}

int64_t TargetModel::expert_projection_bytes() const {
  int64_t bytes = 0;
  for (const TargetLayerWeights& layer : layers_) {
    if (layer.experts.defined()) bytes += layer.experts.projection_bytes();
  }
  return bytes;
}

TargetModel TargetModel::load(const std::filesystem::path& dir, torch::Device device, torch::Dtype dtype,
                              const TargetLoadOptions& options) {
  if (!at::isFloatingType(dtype)) {
    throw std::invalid_argument("TargetModel::load: dtype must be floating point, got " +
                                std::string(c10::toString(dtype)));
  }
  torch::NoGradGuard no_grad;
  TargetModel model;
  model.config_ = load_hf_config(dir);
  if (model.config_.is_dflash_drafter) {
    throw std::runtime_error("'" + dir.string() + "' holds a DFlash drafter, not a target model");
  }
  model.device_ = device;
  model.dtype_ = dtype;
  const HFConfig& c = model.config_;
  // FP8 weights (quant_method fp8) are read as float8 and dequantized here.
  const nlohmann::json raw_config = read_json_file(dir / "config.json");
  const nlohmann::json quantization = raw_config.value("quantization_config", nlohmann::json());
  const bool fp8 = quantization.is_object() && quantization.value("quant_method", std::string()) == "fp8";
  formats::TensorMap tensors = formats::load_checkpoint_dir(dir, /*with_float8=*/fp8);
  const int64_t fp8_weights = fp8 ? count_fp8_weights(tensors) : 0;
  WeightSource source(std::move(tensors), dir, device, dtype);
  if (fp8) source.dequantize_fp8(fp8_block_size(quantization, dir));

  const int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const int64_t q_width = c.num_attention_heads * head_dim, kv_width = c.num_key_value_heads * head_dim;
  const std::string& root = c.tensor_prefix;  // "model." or, in a multimodal wrapper, "model.language_model."
  model.embed_tokens_ = source.take(root + "embed_tokens.weight", {c.vocab_size, hidden});
  model.final_norm_ = source.take(root + "norm.weight", {hidden});
  if (c.tie_word_embeddings && !source.has("lm_head.weight")) {
    model.lm_head_ = model.embed_tokens_;
  } else {
    model.lm_head_ = source.take("lm_head.weight", {c.vocab_size, hidden});
  }
  model.expert_options_ = expert_options(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = root + "layers." + std::to_string(i) + ".";
    const std::string attn = prefix + "self_attn.";
    TargetLayerWeights layer;
    layer.input_layernorm = source.take(prefix + "input_layernorm.weight", {hidden});
    layer.post_attention_layernorm = source.take(prefix + "post_attention_layernorm.weight", {hidden});
    check_layer_kind(source, c, i, prefix);
    if (c.linear_attention(i)) {
      layer.linear = load_linear_attention(source, prefix + "linear_attn.", c);
    } else {
      const int64_t q_out = c.attention_output_gate ? 2 * q_width : q_width;  // Qwen3.5: query and gate per head
      layer.q_proj = source.take(attn + "q_proj.weight", {q_out, hidden});
      layer.k_proj = source.take(attn + "k_proj.weight", {kv_width, hidden});
      layer.v_proj = source.take(attn + "v_proj.weight", {kv_width, hidden});
      layer.o_proj = source.take(attn + "o_proj.weight", {hidden, q_width});
      layer.q_bias = source.take_optional(attn + "q_proj.bias", {q_out}, c.attention_bias);
      layer.k_bias = source.take_optional(attn + "k_proj.bias", {kv_width}, c.attention_bias);
      layer.v_bias = source.take_optional(attn + "v_proj.bias", {kv_width}, c.attention_bias);
      layer.o_bias = source.take_optional(attn + "o_proj.bias", {hidden}, c.attention_output_bias);
      if (c.qk_norm) {
        layer.q_norm = source.take(attn + "q_norm.weight", {head_dim});
        layer.k_norm = source.take(attn + "k_norm.weight", {head_dim});
      }
      if (c.attention_sinks) layer.sinks = source.take(attn + "sinks", {c.num_attention_heads});
    }
    if (c.moe.sparse(i)) {
      layer.experts = c.family == ModelFamily::GptOss ? load_gpt_oss_experts(source, prefix + "mlp.", c, options.mxfp4_experts)
                                                      : load_qwen3_moe_experts(source, prefix + "mlp.", c);
      if (c.moe.shared_expert_intermediate_size > 0) {
        const std::string shared = prefix + "mlp.shared_expert.";
        const int64_t width = c.moe.shared_expert_intermediate_size;
        layer.shared_gate_proj = source.take(shared + "gate_proj.weight", {width, hidden});
        layer.shared_up_proj = source.take(shared + "up_proj.weight", {width, hidden});
        layer.shared_down_proj = source.take(shared + "down_proj.weight", {hidden, width});
        layer.shared_expert_gate = source.take(prefix + "mlp.shared_expert_gate.weight", {1, hidden});
      }
    } else {
      layer.gate_proj = source.take(prefix + "mlp.gate_proj.weight", {c.intermediate_size, hidden});
      layer.up_proj = source.take(prefix + "mlp.up_proj.weight", {c.intermediate_size, hidden});
      layer.down_proj = source.take(prefix + "mlp.down_proj.weight", {hidden, c.intermediate_size});
    }
    model.layers_.push_back(std::move(layer));
  }
  if (fp8) log::info("model", log::str(dir.string(), ": ", fp8_weights, " FP8 weight(s) dequantized on load to ", c10::toString(dtype)));
  if (c.moe.mxfp4) {
    // Which of model.target.mxfp4_experts' forms the run got, and its memory.
    const bool resident = options.mxfp4_experts == Mxfp4Experts::resident;
    const double mib = static_cast<double>(model.expert_projection_bytes()) / (1 << 20);
    log::info("model", log::str(dir.string(), ": MXFP4 experts ",
                                resident ? "resident (packed, each expert dequantized while it computes)"
                                         : "dequantized on load",
                                ", ", std::round(mib * 10) / 10, " MiB (model.target.mxfp4_experts: ",
                                resident ? "resident" : "dequantize", ")"));
  }
  return model;
}

TargetHead TargetModel::head() const {
  return TargetHead(runnable_head_config(config_), embed_tokens_, lm_head_, final_norm_);
}

}  // namespace dflow::target
