// GptOssForCausalLM's config.json: sliding and full layers, sinks, YaRN, the
// experts and MXFP4, transformers' defaults where a key is absent, and the
// refusal of what dflow does not implement, naming the key and its value.
#include <doctest/doctest.h>

#include "target/hf_config.hpp"

using namespace dflow::target;

namespace {

// gpt-oss-20b's published config.json.
nlohmann::json gpt_oss_20b_like() {
  nlohmann::json layer_types = nlohmann::json::array();
  for (int i = 0; i < 24; ++i) layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"architectures", {"GptOssForCausalLM"}},
          {"model_type", "gpt_oss"},
          {"attention_bias", true},
          {"attention_dropout", 0.0},
          {"eos_token_id", 200002},
          {"experts_per_token", 4},
          {"head_dim", 64},
          {"hidden_act", "silu"},
          {"hidden_size", 2880},
          {"initial_context_length", 4096},
          {"initializer_range", 0.02},
          {"intermediate_size", 2880},
          {"layer_types", layer_types},
          {"max_position_embeddings", 131072},
          {"num_attention_heads", 64},
          {"num_experts_per_tok", 4},
          {"num_hidden_layers", 24},
          {"num_key_value_heads", 8},
          {"num_local_experts", 32},
          {"output_router_logits", false},
          {"pad_token_id", 199999},
          {"quantization_config",
           {{"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
            {"quant_method", "mxfp4"}}},
          {"rms_norm_eps", 1e-05},
          {"rope_scaling",
           {{"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"factor", 32.0},
            {"original_max_position_embeddings", 4096},
            {"rope_type", "yarn"},
            {"truncate", false}}},
          {"rope_theta", 150000},
          {"router_aux_loss_coef", 0.9},
          {"sliding_window", 128},
          {"swiglu_limit", 7.0},
          {"tie_word_embeddings", false},
          {"use_cache", true},
          {"vocab_size", 201088}};
}

void check_refused(const nlohmann::json& json, const std::string& key, const std::string& value) {
  CAPTURE(key);
  CHECK_THROWS_WITH_AS(parse_hf_config(json, "oss.json"), doctest::Contains(key.c_str()), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_hf_config(json, "oss.json"), doctest::Contains(value.c_str()), std::runtime_error);
}

}  // namespace

TEST_CASE("Model.HFConfig.GptOssAsPublished") {
  const HFConfig c = parse_hf_config(gpt_oss_20b_like(), "oss.json");
  CHECK(c.family == ModelFamily::GptOss);
  CHECK(c.attention_bias);
  CHECK(c.attention_output_bias);
  CHECK(c.attention_sinks);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.head_dim == 64);
  CHECK(c.sliding_window_per_layer.size() == 24);
  CHECK(c.sliding_window(0) == 128);
  CHECK(c.sliding_window(1) == 0);
  CHECK(c.sliding_window(22) == 128);
  CHECK(c.sliding_window(23) == 0);
  CHECK(c.rope_theta == 150000.0);
  CHECK(c.rope_scaling.type == "yarn");
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 4096);
  CHECK(c.rope_scaling.beta_fast == 32.0);
  CHECK(c.rope_scaling.beta_slow == 1.0);
  CHECK_FALSE(c.rope_scaling.truncate);
  CHECK(c.moe.num_experts == 32);
  CHECK(c.moe.experts_per_token == 4);
  CHECK(c.moe.expert_intermediate_size == 2880);
  CHECK(c.moe.swiglu_limit == 7.0);
  CHECK(c.moe.swiglu_alpha == doctest::Approx(1.702));
  CHECK(c.moe.sparse_layers == std::vector<bool>(24, true));
  CHECK(c.moe.mxfp4);
  CHECK(c.eos_token_ids == std::vector<int64_t>{200002});
}

TEST_CASE("Model.HFConfig.GptOssDefaultsAreTransformers") {
  nlohmann::json json = gpt_oss_20b_like();
  for (const char* key : {"layer_types", "sliding_window", "rope_scaling", "rope_theta", "quantization_config",
                          "attention_bias", "swiglu_limit", "head_dim"}) {
    json.erase(key);
  }
  const HFConfig c = parse_hf_config(json, "oss.json");
  CHECK(c.sliding_window(0) == 128);  // even layers slide, odd layers are full
  CHECK(c.sliding_window(1) == 0);
  CHECK(c.rope_theta == 150000.0);
  CHECK(c.rope_scaling.type == "yarn");  // gpt-oss's own YaRN
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK_FALSE(c.rope_scaling.truncate);
  CHECK(c.attention_bias);
  CHECK(c.moe.swiglu_limit == 7.0);
  CHECK(c.head_dim == 64);
  CHECK_FALSE(c.moe.mxfp4);

  // rope_parameters (newer transformers) with its own rope_theta; no type: default RoPE.
  json["rope_parameters"] = {{"rope_theta", 5000.0}};
  const HFConfig plain = parse_hf_config(json, "oss.json");
  CHECK(plain.rope_scaling.type == "default");
  CHECK(plain.rope_theta == 5000.0);
  // yarn without truncate: transformers truncates.
  json["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 2048}};
  const HFConfig truncated = parse_hf_config(json, "oss.json");
  CHECK(truncated.rope_scaling.truncate);
  CHECK(truncated.rope_scaling.factor == 8.0);
}

TEST_CASE("Model.HFConfig.GptOssRefusalsNameKeyAndValue") {
  SUBCASE("rope type") {
    nlohmann::json json = gpt_oss_20b_like();
    json["rope_scaling"]["rope_type"] = "dynamic";
    check_refused(json, "rope_type 'dynamic'", "not supported");
  }
  SUBCASE("yarn key dflow does not implement") {
    nlohmann::json json = gpt_oss_20b_like();
    json["rope_scaling"]["attention_factor"] = 1.5;
    check_refused(json, "attention_factor", "1.5");
    json = gpt_oss_20b_like();
    json["rope_scaling"]["mscale"] = 0.707;
    check_refused(json, "mscale", "0.707");
  }
  SUBCASE("quantization method") {
    nlohmann::json json = gpt_oss_20b_like();
    json["quantization_config"] = {{"quant_method", "fp8"}};
    check_refused(json, "quant_method 'fp8'", "mxfp4");
  }
  SUBCASE("quantization key") {
    nlohmann::json json = gpt_oss_20b_like();
    json["quantization_config"]["group_size"] = 64;
    check_refused(json, "group_size", "64");
  }
  SUBCASE("layer type") {
    nlohmann::json json = gpt_oss_20b_like();
    json["layer_types"][3] = "chunked_attention";
    check_refused(json, "layer_types", "chunked_attention");
  }
  SUBCASE("layer types of another depth") {
    nlohmann::json json = gpt_oss_20b_like();
    json["layer_types"].erase(0);
    check_refused(json, "layer_types", "one type per layer (24)");
  }
  SUBCASE("sliding layers without a window") {
    nlohmann::json json = gpt_oss_20b_like();
    json["sliding_window"] = nullptr;
    check_refused(json, "sliding_window", "null");
  }
  SUBCASE("more experts per token than experts") {
    nlohmann::json json = gpt_oss_20b_like();
    json["num_experts_per_tok"] = 33;
    check_refused(json, "num_experts_per_tok 33", "num_local_experts 32");
  }
}
