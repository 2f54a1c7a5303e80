// The target's head alone (target/target_head.hpp) from mixture-of-experts
// checkpoints written by transformers (tests/target/hf_random_checkpoints.py):
// Qwen3-MoE and gpt-oss, tied and untied, single file and sharded. The head
// equals what transformers holds, config.json gives the drafter its facts and,
// for a family dflow cannot run, says why, and a loaded TargetModel gives its
// head without a copy.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>

#include "target/gpt_oss_layers.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/target_head.hpp"
#include "target/model_fixtures.hpp"
#include "tools/run_command.hpp"

using namespace dflow::target;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;
namespace fs = std::filesystem;

namespace {

// The four checkpoints, written once per test process.
const fs::path& random_checkpoints() {
  static ScratchDir dir("hf-random");
  static const bool written = [] {
    if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
    const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                     "/tests/target/hf_random_checkpoints.py " + dir.path().string(),
                                                 300);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return true;
  }();
  (void)written;
  return dir.path();
}

// transformers' own tensors of the model it saved (reference.safetensors).
dflow::formats::TensorMap reference_of(const fs::path& checkpoint) {
  return dflow::formats::SafetensorsFile(checkpoint / "reference.safetensors").all_tensors();
}

nlohmann::json config_json(const fs::path& checkpoint) { return read_json_file(checkpoint / "config.json"); }

}  // namespace

TEST_CASE("Model.TargetHead.equals_what_transformers_holds_for_families_dflow_cannot_run") {
  struct Case {
    const char* name;
    const char* architecture;
    bool tied, sharded;
  };
  const Case cases[] = {{"qwen3-moe-tied-single", "Qwen3MoeForCausalLM", true, false},
                        {"qwen3-moe-untied-sharded", "Qwen3MoeForCausalLM", false, true},
                        {"gpt-oss-untied-single", "GptOssForCausalLM", false, false},
                        {"gpt-oss-tied-sharded", "GptOssForCausalLM", true, true}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const fs::path dir = random_checkpoints() / c.name;
    CHECK(fs::exists(dir / "model.safetensors.index.json") == c.sharded);
    const auto reference = reference_of(dir);
    const TargetHead head = TargetHead::load(dir, torch::kCPU, torch::kFloat32, /*with_final_norm=*/true);
    CHECK(head.config().architecture == c.architecture);
    // Both families run in-process.
    CHECK(head.config().runnable());
    CHECK(head.tied() == c.tied);
    CHECK(head.embedding_weight().sizes() == torch::IntArrayRef({300, 64}));
    CHECK(torch::equal(head.embedding_weight(), reference.at("embedding")));
    CHECK(torch::equal(head.lm_head_weight(), reference.at("lm_head")));
    CHECK(torch::equal(head.final_norm_weight(), reference.at("final_norm")));
    if (!c.tied) CHECK_FALSE(torch::equal(head.lm_head_weight(), head.embedding_weight()));
    // A tied head holds one [V, H] tensor, an untied one two, plus the norm.
    const uint64_t matrix_bytes = 300 * 64 * 4;
    CHECK(head.bytes() == (c.tied ? 1 : 2) * matrix_bytes + 64 * 4);
    // dflow's own full reader agrees on every tensor the head took.
    const dflow::formats::TensorMap all = dflow::formats::load_checkpoint_dir(dir);
    CHECK(torch::equal(head.embedding_weight(), all.at("model.embed_tokens.weight")));
    CHECK(all.count("lm_head.weight") == (c.tied ? 0u : 1u));
  }
}

TEST_CASE("Model.TargetHead.converts_like_the_target_and_leaves_the_norm_unless_asked") {
  const fs::path dir = random_checkpoints() / "qwen3-moe-untied-sharded";
  const TargetHead head = TargetHead::load(dir, torch::kCPU, torch::kBFloat16);
  CHECK((head.dtype() == torch::kBFloat16));
  CHECK_FALSE(head.final_norm_weight().defined());
  CHECK(head.bytes() == 2u * 300 * 64 * 2);
  CHECK(torch::equal(head.lm_head_weight(), reference_of(dir).at("lm_head").to(torch::kBFloat16)));
  CHECK_THROWS_WITH_AS(TargetHead::load(dir, torch::kCPU, torch::kInt64), doctest::Contains("floating point"),
                       std::invalid_argument);
}

TEST_CASE("Model.TargetHead.reads_only_the_named_tensors") {
  const fs::path dir = random_checkpoints() / "gpt-oss-untied-single";
  const dflow::formats::TensorMap some =
      dflow::formats::read_checkpoint_tensors(dir, {"lm_head.weight", "no.such.tensor"});
  CHECK(some.size() == 1);
  CHECK(torch::equal(some.at("lm_head.weight"), reference_of(dir).at("lm_head")));

  // A truncated file is refused naming it, as the mapping reader refuses it.
  ScratchDir cut("head-truncated");
  fs::copy_file(dir / "model.safetensors", cut.path() / "model.safetensors");
  fs::resize_file(cut.path() / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
  CHECK_THROWS_WITH_AS(dflow::formats::read_checkpoint_tensors(cut.path(), {"lm_head.weight"}),
                       doctest::Contains("model.safetensors': tensor '"), std::runtime_error);
}

TEST_CASE("Model.TargetHead.refuses_a_checkpoint_without_the_head_or_of_another_shape") {
  ScratchDir dir("head-broken");
  const fs::path source = random_checkpoints() / "gpt-oss-untied-single";
  fs::copy_file(source / "config.json", dir.path() / "config.json");
  const auto reference = reference_of(source);
  dflow::formats::write_safetensors(dir.path() / "model.safetensors",
                                    {{"model.embed_tokens.weight", reference.at("embedding")}});
  CHECK_THROWS_WITH_AS(TargetHead::load(dir.path()), doctest::Contains("lacks tensor 'lm_head.weight'"),
                       std::runtime_error);
  dflow::formats::write_safetensors(dir.path() / "model.safetensors",
                                    {{"model.embed_tokens.weight", reference.at("embedding")},
                                     {"lm_head.weight", reference.at("lm_head").narrow(0, 0, 10)}});
  CHECK_THROWS_WITH_AS(TargetHead::load(dir.path()), doctest::Contains("'lm_head.weight' has shape [10, 64]"),
                       std::runtime_error);
}

TEST_CASE("Model.TargetHead.of_a_loaded_target_shares_its_tensors") {
  const auto target = TargetModel::load(tiny_target_dir());
  const TargetHead head = target.head();
  CHECK(head.embedding_weight().data_ptr() == target.embedding_weight().data_ptr());
  CHECK(head.lm_head_weight().data_ptr() == target.lm_head_weight().data_ptr());
  CHECK(head.config().runnable());
  CHECK(head.config().architecture == "Qwen3ForCausalLM");
  // Loaded alone it holds the same values.
  const TargetHead alone = TargetHead::load(tiny_target_dir());
  CHECK(torch::equal(alone.embedding_weight(), head.embedding_weight()));
  CHECK(torch::equal(alone.lm_head_weight(), head.lm_head_weight()));
  CHECK(alone.tied() == head.tied());
}

TEST_CASE("Model.HeadConfig.reads_what_the_drafter_needs_from_qwen3_moe_and_gpt_oss") {
  const fs::path root = random_checkpoints();
  const HeadConfig moe = load_head_config(root / "qwen3-moe-untied-sharded");
  CHECK(moe.architecture == "Qwen3MoeForCausalLM");
  CHECK(moe.runnable());
  CHECK(moe.family == ModelFamily::Qwen3Moe);
  CHECK(moe.moe.num_experts == 4);
  CHECK(moe.hidden_size == 64);
  CHECK(moe.num_hidden_layers == 2);
  CHECK(moe.num_attention_heads == 4);
  CHECK(moe.num_key_value_heads == 2);
  CHECK(moe.head_dim == 16);
  CHECK(moe.intermediate_size == 96);
  CHECK(moe.vocab_size == 300);
  CHECK_FALSE(moe.tie_word_embeddings);
  CHECK(moe.eos_token_ids == std::vector<int64_t>{7, 11});
  CHECK(moe.rms_norm_eps == doctest::Approx(1e-6));

  const HeadConfig oss = load_head_config(root / "gpt-oss-tied-sharded");
  CHECK(oss.architecture == "GptOssForCausalLM");
  CHECK(oss.runnable());
  CHECK(oss.family == ModelFamily::GptOss);
  CHECK(oss.moe.num_experts == 4);
  CHECK(oss.sliding_window_per_layer == std::vector<int64_t>{8, 0});
  CHECK(oss.tie_word_embeddings);
  CHECK(oss.rope_theta == doctest::Approx(150000.0));
  CHECK(oss.rms_norm_eps == doctest::Approx(1e-5));
  CHECK(oss.max_position_embeddings == 256);
}

TEST_CASE("Model.HeadConfig.says_why_a_known_family_cannot_run_and_names_a_missing_key") {
  nlohmann::json qwen3 = config_json(tiny_target_dir());
  const HeadConfig runnable = parse_head_config(qwen3, "tiny/config.json");
  CHECK(runnable.runnable());
  CHECK(runnable.family == ModelFamily::Qwen3);

  // A family dflow runs, with a key it does not: the reason names the key and value.
  nlohmann::json scaled = qwen3;
  scaled["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  const HeadConfig not_runnable = parse_head_config(scaled, "scaled/config.json");
  CHECK(not_runnable.architecture == "Qwen3ForCausalLM");
  CHECK(not_runnable.not_runnable_because.find("rope_scaling") != std::string::npos);
  CHECK(not_runnable.not_runnable_because.find("yarn") != std::string::npos);
  CHECK(not_runnable.hidden_size == runnable.hidden_size);
  // The full parse still refuses it, naming key and value, as before.
  CHECK_THROWS_WITH_AS(parse_hf_config(scaled, "scaled/config.json"), doctest::Contains("rope_scaling"),
                       std::runtime_error);

  nlohmann::json oss = config_json(random_checkpoints() / "gpt-oss-untied-single");
  oss.erase("intermediate_size");
  CHECK_THROWS_WITH_AS(parse_head_config(oss, "oss/config.json"),
                       doctest::Contains("config.json 'oss/config.json': lacks 'intermediate_size'"), std::runtime_error);
  nlohmann::json drafter = qwen3;
  drafter["architectures"] = {"DFlashDraftModel"};
  CHECK_THROWS_WITH_AS(parse_head_config(drafter, "d/config.json"), doctest::Contains("DFlash drafter"),
                       std::runtime_error);
}

TEST_CASE("Model.HeadConfig.a_gpt_oss_target_dflow_cannot_run_still_norms_as_gpt_oss") {
  // An FP8 gpt-oss (what engine files are for): dflow cannot run it, but its
  // final norm (the kl teacher's, from the files' last slot) must scale
  // before the cast back, as gpt-oss does, not after as the dense families.
  nlohmann::json fp8 = config_json(random_checkpoints() / "gpt-oss-untied-single");
  fp8["quantization_config"] = {{"quant_method", "fp8"}};
  const HeadConfig oss = parse_head_config(fp8, "fp8/config.json");
  REQUIRE_FALSE(oss.runnable());
  CHECK(oss.not_runnable_because.find("fp8") != std::string::npos);
  CHECK(oss.family == ModelFamily::GptOss);
  torch::manual_seed(5);
  const auto x = torch::randn({4, 64}).mul(3).to(torch::kBFloat16);
  const auto weight = torch::randn({64}).to(torch::kBFloat16);
  const auto normed = family_rms_norm(oss, x, weight);
  CHECK(torch::equal(normed, rms_norm_scaled_wide(x, weight, oss.rms_norm_eps)));
  CHECK_FALSE(torch::equal(normed, rms_norm(x, weight, oss.rms_norm_eps)));  // the orders round differently in bf16

  // An architecture dflow does not know: its norm is not guessed as a dense family's.
  nlohmann::json other = fp8;
  other["model_type"] = "mistral";
  other["architectures"] = {"MistralForCausalLM"};
  const HeadConfig mistral = parse_head_config(other, "mistral/config.json");
  CHECK_FALSE(mistral.runnable());
  CHECK(mistral.norm == NormStyle::Unknown);
  CHECK_THROWS_WITH_AS(family_rms_norm(mistral, x, weight), doctest::Contains("MistralForCausalLM"),
                       std::invalid_argument);
}

TEST_CASE("Model.TargetHead.a_command_that_loads_the_whole_target_names_the_architecture") {
  // A gpt-oss target loads whole too.
  const TargetModel oss = TargetModel::load(random_checkpoints() / "gpt-oss-untied-single");
  CHECK(oss.head().config().runnable());
  CHECK(oss.head().config().architecture == "GptOssForCausalLM");
  // A Qwen3-MoE target loads whole, its head runnable.
  const TargetModel moe = TargetModel::load(random_checkpoints() / "qwen3-moe-tied-single");
  CHECK(moe.head().config().runnable());
  CHECK(moe.head().config().architecture == "Qwen3MoeForCausalLM");
}
