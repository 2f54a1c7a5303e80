// DFlash2 (drafter/kinds/dflash2): its forward logits, its loss (the unary
// kl and the selector's K-way cross-entropy) and every parameter's gradient
// against vllm-project/speculators' DFlash2DraftModel on dflow's
// `--format speculators` export (tests/drafter/speculators_reference.py);
// a fresh drafter computes what DFlash does (identity convolutions); greedy
// drafting with the selector is lossless.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "drafter/block_attention.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "drafter/kinds/dflash2/dflash2.hpp"
#include "drafter/objective.hpp"
#include "drafter/speculative.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/layers.hpp"
#include "target/model_fixtures.hpp"
#include "formats/safetensors.hpp"
#include "target/target_head.hpp"
#include "kind_test_rig.hpp"
#include "speculators_check.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

DrafterOptions dflash2_options(int64_t num_layers, const DFlash2Shape& shape) {
  return kind_options("dflash2", dflash2_fields(shape), num_layers);
}

}  // namespace

TEST_CASE("Model.SpeculatorsReference.Dflash2EqualsDFlash2DraftModel") {
  torch::set_num_threads(1);
  const auto target_dir = tiny_target_dir();
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(target_dir);
  DFlash2Shape shape;
  shape.conv_kernel_size = 3;
  shape.conv_group_size = 8;
  shape.selector_rank = 12;
  shape.selector_top_k = 6;
  DFlashDrafter drafter(make_drafter_spec(target_config, dflash2_options(2, shape)), 5);
  const DrafterSpec& spec = drafter->spec();
  perturb(*drafter, 0.05, 11);
  {
    // Off the near-zero codebooks too, so every module moves the result.
    torch::NoGradGuard no_grad;
    for (auto& item : drafter->named_parameters())
      if (item.key().find("codebook") != std::string::npos) item.value().mul_(20.0);
  }
  const dflow::target::TargetHead head = dflow::target::TargetHead::load(target_dir);
  const AnchoredRow row = anchored_row(spec, {3, 11, 20, 37});
  // The block logits, as speculators' _backbone_forward gives them.
  const torch::Tensor logits =
      torch::matmul(block_hidden(*drafter, head.embedding_weight(), row), head.lm_head_weight().t()).contiguous();

  ObjectiveOptions options;
  options.loss = LossMix::single("kl");
  options.loss_decay_gamma = 4.0;
  options.kind_options = {{"selector_loss_alpha", 0.7}};
  const ObjectiveOutput out = row_objective(*drafter, head.embedding_weight(), head.lm_head_weight(), row, options);
  REQUIRE(out.term_loss_sums.size() == 1);
  CHECK(out.term_loss_sums[0] > 0.0);
  out.loss_sum.backward();

  std::vector<std::pair<std::string, torch::Tensor>> tensors{
      {"input_ids", row.input_ids},
      {"features", row.features},
      {"anchors", row.anchors.view({row.anchors_n})},
      {"loss_mask", row.loss_mask},
      {"teacher", row.teacher_pre},
      {"logits", logits},
      {"main_loss_sum", torch::full({1}, out.main_loss_sum, torch::kFloat64)},
      {"selector_loss_sum", torch::full({1}, out.term_loss_sums[0], torch::kFloat64)},
      {"gamma", torch::full({1}, 4.0)},
      {"selector_loss_alpha", torch::full({1}, 0.7)}};
  add_gradients(*drafter, tensors);
  check_with_speculators("dflash2", *drafter, target_dir, tensors);
}

TEST_CASE("Model.Dflash2.FreshDrafterComputesWhatDFlashDoes") {
  // Identity convolutions: with DFlash's backbone weights, the same hidden states.
  torch::set_num_threads(1);
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(tiny_target_dir());
  const DrafterOptions options = dflash2_options(2, DFlash2Shape{});
  DFlashDrafter dflash2(make_drafter_spec(target_config, options), 5);
  DFlashDrafter dflash = dflash_twin(target_config, options, *dflash2);
  const int64_t H = dflash->spec().hidden_size;
  const TwoBlocks b = two_blocks(H, 8);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(dflash2->forward(b.features, b.embeddings, b.positions, b.plan),
                     dflash->forward(b.features, b.embeddings, b.positions, b.plan)));
  CHECK(torch::equal(sublayer_conv(*dflash2, 1, false).base_kernel[0][0], torch::ones({H})));
}

TEST_CASE("Model.Dflash2.GreedyDraftingWithTheSelectorEqualsTargetGreedy") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DFlash2Shape shape;
  shape.conv_group_size = 8;
  shape.selector_rank = 8;
  shape.selector_top_k = 5;
  DrafterOptions options = dflash2_options(1, shape);
  options.block_size = 4;
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 23);
  {
    // Convolutions and codebooks large enough that the selector changes the drafts.
    torch::NoGradGuard no_grad;
    torch::manual_seed(9);
    for (auto& item : drafter->named_parameters())
      if (item.key().find("conv") != std::string::npos || item.key().find("candidate_selector") != std::string::npos)
        item.value().add_(torch::randn_like(item.value()) * 0.5);
  }
  torch::manual_seed(12);
  int64_t changed = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const std::vector<int64_t> prompt = random_prompt(3 + 5 * i);
    CAPTURE(i);
    check_greedy_is_lossless(*drafter, target, prompt);
    // The selector's drafts differ from the backbone's own argmax (its
    // transition scores zeroed) somewhere.
    DrafterContextCache cache = prefilled_context(*drafter, target, prompt);
    const auto draft = [&] { return drafter_generate_block(*drafter, target, cache, prompt.back()); };
    const std::vector<int64_t> reranked = draft();
    const std::vector<int64_t> unary = drafted_without(candidate_selector(*drafter).predecessor_codebook, draft);
    for (size_t k = 0; k < reranked.size(); ++k) changed += reranked[k] != unary[k] ? 1 : 0;
  }
  CHECK(changed > 0);
}
