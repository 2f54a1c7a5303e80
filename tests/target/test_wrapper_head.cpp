// The head of a multimodal wrapper checkpoint (Qwen3.5/3.6 dense and MoE,
// Qwen3-VL, Llama 4; tiny random ones written by transformers,
// tests/target/hf_wrapper_checkpoints.py): its text config gives the drafter
// its facts, its tensors are read by the wrapper's names, and its final norm
// and LM head equal transformers' on the same hidden states (the kl teacher).
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>

#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"
#include "target/target.hpp"
#include "target/target_head.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using dflow::target::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path& wrapper_checkpoints() {
  static ScratchDir dir("hf-wrappers");
  static const bool written = [] {
    if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
    const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                     "/tests/target/hf_wrapper_checkpoints.py " + dir.path().string(),
                                                 600);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return true;
  }();
  (void)written;
  return dir.path();
}

struct Case {
  const char* name;
  const char* architecture;
  const char* text_model_type;
  bool tied;
  int64_t intermediate_size;  // 0: the MoE text config has no dense one
  NormStyle norm;
  bool runs;  // Qwen3.5/3.6 run in-process (test_qwen3_5_reference.cpp); the others are head-only
};
const Case kCases[] = {
    {"qwen3_5-moe-untied-single", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_text", false, 0,
     NormStyle::OnePlusWeight, true},
    {"qwen3_5-moe-tied-sharded", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_text", true, 0,
     NormStyle::OnePlusWeight, true},
    {"qwen3_5-dense-untied-sharded", "Qwen3_5ForConditionalGeneration", "qwen3_5_text", false, 96,
     NormStyle::OnePlusWeight, true},
    {"qwen3-vl-untied-single", "Qwen3VLForConditionalGeneration", "qwen3_vl_text", false, 96,
     NormStyle::ScaleAfterCast, false},
    {"llama4-untied-single", "Llama4ForConditionalGeneration", "llama4_text", false, 96, NormStyle::ScaleAfterCast,
     false},
};

dflow::formats::TensorMap reference_of(const fs::path& checkpoint) {
  return dflow::formats::SafetensorsFile(checkpoint / "reference.safetensors").all_tensors();
}

}  // namespace

TEST_CASE("Model.WrapperHead.reads_the_text_config_and_the_tensors_transformers_holds") {
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const fs::path dir = wrapper_checkpoints() / c.name;
    const HeadConfig config = load_head_config(dir);
    CHECK(config.architecture == c.architecture);
    CHECK(config.wrapper());
    CHECK(config.text_model_type == c.text_model_type);
    CHECK(config.runnable() == c.runs);  // the others refused in-process, naming why
    if (!c.runs) CHECK(config.not_runnable_because.find("multimodal wrapper") != std::string::npos);
    CHECK(config.hidden_size == 64);
    CHECK(config.num_hidden_layers == 4);
    CHECK(config.num_attention_heads == 4);
    CHECK(config.num_key_value_heads == 2);
    CHECK(config.head_dim == 16);
    CHECK(config.vocab_size == 300);
    CHECK(config.intermediate_size == c.intermediate_size);
    CHECK(config.tie_word_embeddings == c.tied);
    CHECK(config.eos_token_ids == std::vector<int64_t>{7, 11});
    CHECK(config.norm == c.norm);

    const TargetHead head = TargetHead::load(dir, torch::kCPU, torch::kFloat32, /*with_final_norm=*/true);
    const dflow::formats::TensorMap reference = reference_of(dir);
    CHECK(torch::equal(head.embedding_weight(), reference.at("embedding")));
    CHECK(torch::equal(head.lm_head_weight(), reference.at("lm_head")));
    CHECK(torch::equal(head.final_norm_weight(), reference.at("final_norm")));
    CHECK(head.tied() == c.tied);
  }
}

TEST_CASE("Model.WrapperHead.Reference.final_norm_and_lm_head_equal_transformers") {
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const fs::path dir = wrapper_checkpoints() / c.name;
    const TargetHead head = TargetHead::load(dir, torch::kCPU, torch::kFloat32, /*with_final_norm=*/true);
    const dflow::formats::TensorMap reference = reference_of(dir);
    const auto& weight = head.final_norm_weight();
    const auto normed = family_rms_norm(head.config(), reference.at("hidden_f32"), weight);
    // The same ATen kernels in the same order as transformers' norm: the same bits.
    CHECK(torch::equal(normed, reference.at("normed_f32")));
    CHECK(torch::equal(family_rms_norm(head.config(), reference.at("hidden_bf16"), weight),
                       reference.at("normed_bf16")));
    const auto logits = at::linear(normed, head.lm_head_weight());
    CHECK(torch::allclose(logits, reference.at("logits_f32"), /*rtol=*/1e-5, /*atol=*/1e-4));
    if (c.norm == NormStyle::OnePlusWeight) {
      // Qwen3's norm (weight, not 1 + weight) would be far off: the teacher would be another model's.
      const auto as_qwen3 = rms_norm(reference.at("hidden_f32"), weight, head.config().rms_norm_eps);
      CHECK((as_qwen3 - reference.at("normed_f32")).abs().max().item<double>() > 0.5);
    }
  }
}

TEST_CASE("Model.WrapperHead.bad_wrappers_name_the_key_the_file_and_the_tensors_tried") {
  const fs::path moe = wrapper_checkpoints() / "qwen3_5-moe-untied-single";
  nlohmann::json json = read_json_file(moe / "config.json");

  nlohmann::json lacking = json;
  lacking["text_config"].erase("hidden_size");
  CHECK_THROWS_WITH_AS(parse_head_config(lacking, "wrapper/config.json"),
                       doctest::Contains("config.json 'wrapper/config.json': lacks 'text_config.hidden_size'"),
                       std::runtime_error);
  nlohmann::json zero = json;
  zero["text_config"]["vocab_size"] = 0;
  CHECK_THROWS_WITH_AS(parse_head_config(zero, "wrapper/config.json"),
                       doctest::Contains("'text_config.vocab_size' must be a positive integer"), std::runtime_error);

  // Gemma 3 scales its embedding: refused, saying why.
  CHECK_THROWS_WITH_AS(load_head_config(wrapper_checkpoints() / "gemma3-tied-single"),
                       doctest::Contains("sqrt(hidden_size)"), std::runtime_error);

  // A wrapper dflow does not know: its sizes are read, its norm is not guessed.
  nlohmann::json unknown = json;
  unknown["architectures"] = {"FooForConditionalGeneration"};
  unknown["model_type"] = "foo";
  const HeadConfig foo = parse_head_config(unknown, "foo/config.json");
  CHECK(foo.hidden_size == 64);
  CHECK(foo.norm == NormStyle::Unknown);
  const auto x = torch::randn({2, 64});
  CHECK_THROWS_WITH_AS(family_rms_norm(foo, x, torch::zeros({64})), doctest::Contains("FooForConditionalGeneration"),
                       std::invalid_argument);

  // Tensors under neither scheme: every embedding name tried is listed.
  ScratchDir renamed("wrapper-renamed");
  dflow::formats::TensorMap tensors = dflow::formats::SafetensorsFile(moe / "model.safetensors").all_tensors();
  std::vector<std::pair<std::string, torch::Tensor>> kept;
  for (const auto& [name, tensor] : tensors)
    if (name.find("embed_tokens") == std::string::npos) kept.emplace_back(name, tensor);
  dflow::formats::write_safetensors(renamed.path() / "model.safetensors", kept, {{"format", "pt"}});
  std::ofstream(renamed.path() / "config.json") << json.dump();
  CHECK_THROWS_WITH_AS(TargetHead::load(renamed.path()),
                       doctest::Contains("tried 'model.embed_tokens.weight', "
                                         "'model.language_model.embed_tokens.weight', "
                                         "'language_model.model.embed_tokens.weight'"),
                       std::runtime_error);
}
