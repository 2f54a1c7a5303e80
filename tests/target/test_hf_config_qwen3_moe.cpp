// Qwen3MoeForCausalLM's config.json: the experts, the layers transformers
// makes sparse, and the refusal of what dflow does not implement, naming the
// key and its value.
#include <doctest/doctest.h>

#include "target/hf_config.hpp"

using namespace dflow::target;

namespace {

// Qwen3-30B-A3B's published config.json.
nlohmann::json qwen3_30b_a3b_like() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}},
          {"model_type", "qwen3_moe"},
          {"attention_bias", false},
          {"decoder_sparse_step", 1},
          {"eos_token_id", 151645},
          {"head_dim", 128},
          {"hidden_act", "silu"},
          {"hidden_size", 2048},
          {"intermediate_size", 6144},
          {"max_position_embeddings", 40960},
          {"max_window_layers", 48},
          {"mlp_only_layers", nlohmann::json::array()},
          {"moe_intermediate_size", 768},
          {"norm_topk_prob", true},
          {"num_attention_heads", 32},
          {"num_experts", 128},
          {"num_experts_per_tok", 8},
          {"num_hidden_layers", 48},
          {"num_key_value_heads", 4},
          {"output_router_logits", false},
          {"rms_norm_eps", 1e-06},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000.0},
          {"router_aux_loss_coef", 0.001},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", false},
          {"use_sliding_window", false},
          {"vocab_size", 151936}};
}

void check_refused(const nlohmann::json& json, const std::string& key, const std::string& value) {
  CAPTURE(key);
  CHECK_THROWS_WITH_AS(parse_hf_config(json, "moe.json"), doctest::Contains(key.c_str()), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse_hf_config(json, "moe.json"), doctest::Contains(value.c_str()), std::runtime_error);
}

}  // namespace

TEST_CASE("Model.HFConfig.Qwen3MoeAsPublished") {
  const HFConfig c = parse_hf_config(qwen3_30b_a3b_like(), "moe.json");
  CHECK(c.family == ModelFamily::Qwen3Moe);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.attention_output_bias);
  CHECK(c.rope_theta == doctest::Approx(1e6));
  CHECK(c.moe.num_experts == 128);
  CHECK(c.moe.experts_per_token == 8);
  CHECK(c.moe.expert_intermediate_size == 768);
  CHECK(c.moe.norm_topk_prob);
  CHECK(c.moe.swiglu_limit == 0.0);
  REQUIRE(c.moe.sparse_layers.size() == 48);
  for (int64_t i = 0; i < 48; ++i) CHECK(c.moe.sparse(i));
  CHECK(c.sliding_window(0) == 0);
}

TEST_CASE("Model.HFConfig.Qwen3MoeSparseLayersAsTransformersDecides") {
  nlohmann::json json = qwen3_30b_a3b_like();
  json["num_hidden_layers"] = 6;
  SUBCASE("decoder_sparse_step 2: layers 1, 3, 5 sparse") {
    json["decoder_sparse_step"] = 2;
    const HFConfig c = parse_hf_config(json, "moe.json");
    CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, false, true, false, true});
  }
  SUBCASE("mlp_only_layers are dense whatever the step") {
    json["mlp_only_layers"] = {0, 3};
    const HFConfig c = parse_hf_config(json, "moe.json");
    CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, true, false, true, true});
  }
  SUBCASE("no experts: every layer dense") {
    json["num_experts"] = 0;
    const HFConfig c = parse_hf_config(json, "moe.json");
    for (int64_t i = 0; i < 6; ++i) CHECK_FALSE(c.moe.sparse(i));
  }
  SUBCASE("num_local_experts, as transformers' save_pretrained writes it") {
    json.erase("num_experts");
    json["num_local_experts"] = 16;
    CHECK(parse_hf_config(json, "moe.json").moe.num_experts == 16);
  }
  SUBCASE("attention_bias puts biases on q, k, v and o") {
    json["attention_bias"] = true;
    const HFConfig c = parse_hf_config(json, "moe.json");
    CHECK(c.attention_bias);
    CHECK(c.attention_output_bias);
  }
  SUBCASE("norm_topk_prob defaults to false") {
    json.erase("norm_topk_prob");
    CHECK_FALSE(parse_hf_config(json, "moe.json").moe.norm_topk_prob);
  }
}

TEST_CASE("Model.HFConfig.Qwen3MoeRefusesWhatDflowDoesNotImplement") {
  nlohmann::json json = qwen3_30b_a3b_like();
  SUBCASE("quantization_config") {  // FP8 is read (Qwen3-30B-A3B-FP8, Model.Fp8Target.*); other methods are not
    json["quantization_config"] = {{"quant_method", "fp8"}};
    CHECK_NOTHROW(parse_hf_config(json, "moe.json"));
    json["quantization_config"] = {{"quant_method", "awq"}};
    check_refused(json, "quantization_config", "awq");
  }
  SUBCASE("top-k beyond the experts") {
    json["num_experts_per_tok"] = 129;
    check_refused(json, "num_experts_per_tok 129", "num_experts 128");
  }
  SUBCASE("sliding window") {
    json["use_sliding_window"] = true;
    check_refused(json, "use_sliding_window", "true");
  }
  SUBCASE("another activation") {
    json["hidden_act"] = "gelu";
    check_refused(json, "hidden_act", "gelu");
  }
  SUBCASE("rope scaling") {
    json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    check_refused(json, "rope_scaling", "yarn");
  }
  SUBCASE("experts counted twice, differently") {
    json["num_local_experts"] = 64;
    check_refused(json, "num_local_experts", "64");
  }
  SUBCASE("a dense layer that does not exist") {
    json["mlp_only_layers"] = {48};
    check_refused(json, "mlp_only_layers", "48");
  }
  SUBCASE("no expert width") {
    json.erase("moe_intermediate_size");
    check_refused(json, "moe_intermediate_size", "missing");
  }
  SUBCASE("decoder_sparse_step 0") {
    json["decoder_sparse_step"] = 0;
    check_refused(json, "decoder_sparse_step", "0");
  }
}
