// config.json parsing: the three families, their defaults, and refusals.
#include <doctest/doctest.h>

#include "target/hf_config.hpp"

using namespace dflow::target;

namespace {

nlohmann::json qwen3_8b_like() {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"hidden_size", 4096},
          {"num_hidden_layers", 36},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"intermediate_size", 12288},
          {"vocab_size", 151936},
          {"max_position_embeddings", 40960},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000},
          {"rope_scaling", nullptr},
          {"attention_bias", false},
          {"tie_word_embeddings", false},
          {"eos_token_id", 151645},
          {"hidden_act", "silu"}};
}

}  // namespace

TEST_CASE("Model.HFConfig.Qwen3") {
  const HFConfig c = parse_hf_config(qwen3_8b_like(), "qwen3.json");
  CHECK(c.family == ModelFamily::Qwen3);
  CHECK(c.hidden_size == 4096);
  CHECK(c.num_hidden_layers == 36);
  CHECK(c.kv_groups() == 4);
  CHECK(c.head_dim == 128);
  CHECK(c.rope_theta == doctest::Approx(1e6));
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int64_t>{151645});
  CHECK_FALSE(c.mask_token_id.has_value());
}

TEST_CASE("Model.HFConfig.Qwen2HasQkvBiasesAndNoQkNorm") {
  nlohmann::json json = qwen3_8b_like();
  json["model_type"] = "qwen2";
  json["architectures"] = {"Qwen2ForCausalLM"};
  json.erase("head_dim");
  json["use_sliding_window"] = false;
  const HFConfig c = parse_hf_config(json, "qwen2.json");
  CHECK(c.family == ModelFamily::Qwen2);
  CHECK(c.attention_bias);
  CHECK_FALSE(c.attention_output_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.head_dim == 4096 / 32);
}

TEST_CASE("Model.HFConfig.LlamaDefaults") {
  const nlohmann::json json = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                               {"hidden_size", 2048},                  {"num_hidden_layers", 16},
                               {"num_attention_heads", 32},            {"intermediate_size", 8192},
                               {"vocab_size", 128256},                 {"rope_theta", 500000.0},
                               {"tie_word_embeddings", true},          {"eos_token_id", {128001, 128008}}};
  const HFConfig c = parse_hf_config(json, "llama.json");
  CHECK(c.family == ModelFamily::Llama);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.head_dim == 64);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008});
}

TEST_CASE("Model.HFConfig.MaskTokenFromEitherField") {
  nlohmann::json json = qwen3_8b_like();
  json["dflow_mask_token_id"] = 151669;
  CHECK(parse_hf_config(json, "a.json").mask_token_id == 151669);
  json.erase("dflow_mask_token_id");
  json["dflash_config"] = {{"mask_token_id", 151665}};
  CHECK(parse_hf_config(json, "b.json").mask_token_id == 151665);
  json["dflash_config"]["mask_token_id"] = 999999999;
  CHECK_THROWS_WITH_AS(parse_hf_config(json, "c.json"), doctest::Contains("outside the vocabulary"), std::runtime_error);
}

TEST_CASE("Model.HFConfig.RefusalsNameTheProblem") {
  SUBCASE("rope scaling") {
    nlohmann::json json = qwen3_8b_like();
    json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("rope_scaling"), std::runtime_error);
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("yarn"), std::runtime_error);
  }
  SUBCASE("unsupported model type") {
    nlohmann::json json = qwen3_8b_like();
    json["model_type"] = "mixtral";
    json["architectures"] = {"MixtralForCausalLM"};
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("mixtral"), std::runtime_error);
  }
  SUBCASE("unsupported architecture") {
    nlohmann::json json = qwen3_8b_like();
    json["architectures"] = {"MixtralForCausalLM"};
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("MixtralForCausalLM"), std::runtime_error);
  }
  SUBCASE("architecture of another family than model_type") {
    nlohmann::json json = qwen3_8b_like();
    json["architectures"] = {"Qwen3MoeForCausalLM"};
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("inconsistent"), std::runtime_error);
  }
  SUBCASE("missing size") {
    nlohmann::json json = qwen3_8b_like();
    json.erase("hidden_size");
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("'hidden_size'"), std::runtime_error);
  }
  SUBCASE("quantized weights") {  // GPTQ: dflow would read the packed integers as weights
    nlohmann::json json = qwen3_8b_like();
    json["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"),
                         doctest::Contains("quantization_config {\"bits\":4,\"quant_method\":\"gptq\"} "
                                           "is not supported for qwen3"),
                         std::runtime_error);
    // FP8 (Qwen3-8B-FP8) is read, and dequantized on load (Model.Fp8Target.*).
    json["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
    CHECK(parse_hf_config(json, "x.json").hidden_size == 4096);
  }
  SUBCASE("sliding window") {
    nlohmann::json json = qwen3_8b_like();
    json["use_sliding_window"] = true;
    CHECK_THROWS_WITH_AS(parse_hf_config(json, "x.json"), doctest::Contains("sliding"), std::runtime_error);
  }
}
