// The drafter's visibility rules (the classic silent bugs), its parameters,
// and save/load.
#include <doctest/doctest.h>

#include <fstream>

#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::drafter;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::small_drafter_spec;

namespace {

// One sample, S = 10, two blocks of 4 at anchors 3 and 6, float64, with
// weights large enough that every input visibly moves the outputs.
struct VisibilityRig {
  DrafterSpec spec = small_drafter_spec(2, 4, 2);
  DFlashDrafter drafter{spec, 3};
  torch::Tensor features, embeddings, positions, anchors, keep;

  VisibilityRig() {
    torch::set_num_threads(1);
    drafter->to(torch::kFloat64);
    torch::manual_seed(21);
    torch::NoGradGuard no_grad;
    for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.3);
    features = torch::randn({1, 10, 2 * spec.hidden_size}, torch::kFloat64);
    embeddings = torch::randn({1, 8, spec.hidden_size}, torch::kFloat64);
    anchors = torch::tensor({3, 6}, torch::kInt64).view({1, 2});
    keep = torch::ones({1, 2}, torch::kBool);
    positions = (anchors.unsqueeze(-1) + torch::arange(4, torch::kInt64)).view({1, 8});
  }
  torch::Tensor run(const torch::Tensor& f, const torch::Tensor& e) {
    torch::NoGradGuard no_grad;
    return drafter->forward(f, e, positions, plan_block_attention(anchors, keep, 10, 4, 1, torch::kCPU));
  }
  static torch::Tensor block(const torch::Tensor& out, int64_t j) { return out.narrow(1, j * 4, 4); }
};

}  // namespace

TEST_CASE("Model.Drafter.ContextIsVisibleStrictlyBeforeTheAnchor") {
  VisibilityRig rig;
  const torch::Tensor base = rig.run(rig.features, rig.embeddings);
  torch::Tensor at_anchor = rig.features.clone();
  at_anchor[0][3] += 1.0;  // position == anchor of block 0: must stay invisible to it (bug 2: <= instead of <)
  const torch::Tensor changed_at = rig.run(at_anchor, rig.embeddings);
  CHECK(torch::equal(VisibilityRig::block(changed_at, 0), VisibilityRig::block(base, 0)));
  CHECK_FALSE(torch::allclose(VisibilityRig::block(changed_at, 1), VisibilityRig::block(base, 1)));  // 3 < 6

  torch::Tensor later = rig.features.clone();
  later[0][8] += 1.0;  // after both anchors
  CHECK(torch::equal(rig.run(later, rig.embeddings), base));

  torch::Tensor before = rig.features.clone();
  before[0][2] += 1.0;  // just before anchor 3
  CHECK_FALSE(torch::allclose(VisibilityRig::block(rig.run(before, rig.embeddings), 0), VisibilityRig::block(base, 0)));
}

TEST_CASE("Model.Drafter.BlockIsBidirectionalAndIsolated") {
  VisibilityRig rig;
  const torch::Tensor base = rig.run(rig.features, rig.embeddings);
  torch::Tensor slot_two = rig.embeddings.clone();
  slot_two[0][2] += 1.0;  // block 0, slot 2
  const torch::Tensor changed = rig.run(rig.features, slot_two);
  for (const int64_t slot : {0, 1, 3}) {  // earlier slots see later ones: no causal mask inside a block
    CAPTURE(slot);
    CHECK_FALSE(torch::allclose(changed[0][slot], base[0][slot]));
  }
  CHECK(torch::equal(VisibilityRig::block(changed, 1), VisibilityRig::block(base, 1)));  // other blocks never see it

  torch::Tensor other_block = rig.embeddings.clone();
  other_block[0].narrow(0, 4, 4) += 1.0;
  CHECK(torch::equal(VisibilityRig::block(rig.run(rig.features, other_block), 0), VisibilityRig::block(base, 0)));
}

TEST_CASE("Model.Drafter.PaddingBlockRowsAreFiniteAndIgnored") {
  VisibilityRig rig;
  rig.keep[0][1] = false;
  const torch::Tensor out = rig.run(rig.features, rig.embeddings);
  CHECK(torch::isfinite(out).all().item<bool>());
  // A padding block attends to nothing: its attention output is zero, so
  // changing the context cannot reach it.
  torch::Tensor other = rig.features.clone();
  other[0][0] += 1.0;
  CHECK(torch::equal(VisibilityRig::block(rig.run(other, rig.embeddings), 1), VisibilityRig::block(out, 1)));
}

TEST_CASE("Model.Drafter.ParameterNamesAndInitialisation") {
  const DrafterSpec spec = small_drafter_spec(2, 4, 3);
  DFlashDrafter drafter(spec, 1);
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : drafter->named_parameters()) params[item.key()] = item.value();
  for (const char* name :
       {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.q_proj.weight",
        "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
        "layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight", "layers.1.mlp.gate_proj.weight",
        "layers.1.mlp.up_proj.weight", "layers.1.mlp.down_proj.weight", "layers.1.input_layernorm.weight",
        "layers.1.post_attention_layernorm.weight"}) {
    CAPTURE(name);
    CHECK(params.count(name) == 1);
  }
  CHECK(params.size() == 3 + 2 * 11);  // no embedding, no lm_head: those are the target's, frozen
  CHECK(params.at("fc.weight").sizes() == torch::IntArrayRef({32, 3 * 32}));
  CHECK(torch::equal(params.at("layers.0.input_layernorm.weight"), torch::ones({32})));
  CHECK(params.at("layers.0.mlp.up_proj.weight").std().item<double>() == doctest::Approx(0.02).epsilon(0.1));
  CHECK(params.at("fc.weight").mean().abs().item<double>() < 0.002);

  DFlashDrafter same(spec, 1), other(spec, 2);
  CHECK(torch::equal(same->fc->weight, drafter->fc->weight));
  CHECK_FALSE(torch::equal(other->fc->weight, drafter->fc->weight));
}

TEST_CASE("Model.Drafter.SpecFromTargetConfig") {
  const DrafterSpec spec = small_drafter_spec(5, 16, 0);  // features default to the draft layer count
  // The public formula repeats layers of a 6-layer target ([1, 2, 2, 2, 3]): rising ones below the last instead.
  CHECK(spec.target_layer_ids == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(spec.mask_token_id == 49);
  dflow::target::HFConfig no_mask;
  no_mask.hidden_size = 32;
  no_mask.num_hidden_layers = 6;
  no_mask.num_attention_heads = 4;
  no_mask.num_key_value_heads = 2;
  no_mask.head_dim = 8;
  no_mask.intermediate_size = 48;
  no_mask.vocab_size = 50;
  CHECK_THROWS_WITH_AS(make_drafter_spec(no_mask, {}), doctest::Contains("no mask token id"), std::invalid_argument);
  DrafterOptions bad_mask;
  bad_mask.mask_token_id = 50;
  CHECK_THROWS_WITH_AS(make_drafter_spec(no_mask, bad_mask), doctest::Contains("not a row of the target embedding"),
                       std::invalid_argument);
}

TEST_CASE("Model.Drafter.SaveLoadRoundTrip") {
  torch::set_num_threads(1);
  ScratchDir dir("drafter-io");
  VisibilityRig rig;
  save_pretrained(*rig.drafter, dir.path());

  const auto config = dflow::target::read_json_file(dir.path() / "config.json");
  CHECK(config["architectures"] == nlohmann::json::array({"DFlashDraftModel"}));
  CHECK(config["model_type"] == "qwen3");
  CHECK(config["num_hidden_layers"] == 2);
  CHECK(config["block_size"] == 4);
  CHECK(config["num_target_layers"] == 6);
  CHECK(config["dflash_config"]["mask_token_id"] == 49);
  CHECK(config["dflash_config"]["target_layer_ids"] == nlohmann::json(rig.spec.target_layer_ids));
  CHECK(config["hidden_size"] == 32);
  CHECK(config["head_dim"] == 8);
  CHECK(dflow::formats::SafetensorsFile(dir.path() / "model.safetensors").contains("layers.1.self_attn.k_norm.weight"));

  DFlashDrafter loaded = load_pretrained(dir.path());
  CHECK((loaded->fc->weight.scalar_type() == torch::kFloat64));
  CHECK(loaded->spec().target_layer_ids == rig.spec.target_layer_ids);
  torch::NoGradGuard no_grad;
  const auto plan = plan_block_attention(rig.anchors, rig.keep, 10, 4, 0, torch::kCPU);
  CHECK(torch::equal(loaded->forward(rig.features, rig.embeddings, rig.positions, plan),
                     rig.drafter->forward(rig.features, rig.embeddings, rig.positions, plan)));

  // A checkpoint missing a tensor is refused, naming it.
  std::vector<std::pair<std::string, torch::Tensor>> partial;
  for (const auto& item : rig.drafter->named_parameters()) {
    if (item.key() != "layers.0.mlp.up_proj.weight") partial.emplace_back(item.key(), item.value());
  }
  dflow::formats::write_safetensors(dir.path() / "model.safetensors", partial);
  CHECK_THROWS_WITH_AS(load_pretrained(dir.path()), doctest::Contains("lacks tensor 'layers.0.mlp.up_proj.weight'"),
                       std::runtime_error);
}
