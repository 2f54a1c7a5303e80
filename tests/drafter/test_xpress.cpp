// XPress (drafter/kinds/xpress): its forward logits (the backbone's and the
// teacher-forced refined ones), its loss (the teacher-forced loss, the
// consistency rounds, the base anchor), its metrics and every parameter's
// gradient against vllm-project/speculators' XPressDraftModel on dflow's
// `--format speculators` export (tests/drafter/speculators_reference.py);
// greedy drafting with the Jacobi passes is lossless.
#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "drafter/block_attention.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "drafter/kind.hpp"
#include "drafter/kinds/xpress/xpress.hpp"
#include "drafter/objective.hpp"
#include "drafter/speculative.hpp"
#include "formats/safetensors.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/layers.hpp"
#include "target/model_fixtures.hpp"
#include "target/target_head.hpp"
#include "kind_test_rig.hpp"
#include "speculators_check.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

DrafterOptions xpress_options(int64_t num_layers, const XPressShape& shape) {
  return kind_options("xpress", xpress_fields(shape), num_layers);
}

double total(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// The refiner drawn large enough that its bias moves the argmax (it starts
// as a near no-op: the mixer at zero, the readout at std 0.02).
void enlarge_refiner(DFlashDrafterImpl& drafter, double scale) {
  torch::NoGradGuard no_grad;
  RefinerHeadImpl& refiner = refiner_head(drafter);
  refiner.mix_l.add_(torch::randn_like(refiner.mix_l) * 0.3);
  for (torch::Tensor* w : {&refiner.token_embed->weight, &refiner.in_proj->weight, &refiner.readout->weight})
    w->mul_(scale);
}

}  // namespace

TEST_CASE("Model.SpeculatorsReference.XpressEqualsXPressDraftModel") {
  torch::set_num_threads(1);
  const auto target_dir = tiny_target_dir();
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(target_dir);
  XPressShape shape;
  shape.xpress_rank = 12;
  shape.xpress_mlp_ratio = 2;
  shape.num_jacobi_passes = 4;
  DFlashDrafter drafter(make_drafter_spec(target_config, xpress_options(2, shape)), 5);
  const DrafterSpec& spec = drafter->spec();
  perturb(*drafter, 0.05, 11);
  enlarge_refiner(*drafter, 20.0);
  const dflow::target::TargetHead head = dflow::target::TargetHead::load(target_dir);
  // Anchor 0 has no token before it: its slot 0 reads the anchor's own.
  const AnchoredRow row = anchored_row(spec, {0, 11, 20, 37});
  const int64_t N = row.anchors_n, Bs = row.block;

  // The backbone's block logits and the teacher-forced refined ones, as
  // speculators' _backbone_forward and refiner_head.block_bias give them.
  const torch::Tensor hidden = block_hidden(*drafter, head.embedding_weight(), row);
  const torch::Tensor logits = torch::matmul(hidden, head.lm_head_weight().t()).contiguous();
  torch::Tensor refined;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor data = row.input_ids[0].index_select(0, row.positions[0]).view({N, Bs});
    const torch::Tensor before = row.input_ids[0].index_select(0, (row.anchors[0] - 1).clamp_min(0));
    const torch::Tensor prev = torch::cat({before.unsqueeze(1), data.narrow(1, 0, Bs - 1)}, 1);
    RefinerHeadImpl& refiner = refiner_head(*drafter);
    refined = (logits + refiner.readout->forward(refiner.features(prev, refiner.hidden_cache(hidden)))).contiguous();
  }

  // XPress's own recipe: {ce: 0.1, tv: 0.9} (dflow's ce on the data's
  // token: speculators' ce_from_data), its default rounds and weights.
  ObjectiveOptions options;
  options.loss = LossMix{{{"ce", 0.1}, {"tv", 0.9}}};
  options.loss_decay_gamma = 4.0;
  options.kind_options = {{"consistency_weight", 0.3},
                          {"consistency_passes", 3},
                          {"base_anchor_weight", 0.6},
                          {"base_anchor_full_weight", false}};
  const ObjectiveOutput out = row_objective(*drafter, head.embedding_weight(), head.lm_head_weight(), row, options);
  REQUIRE(out.term_loss_sums.size() == 2);
  CHECK(out.term_loss_sums[0] > 0.0);
  CHECK(out.term_loss_sums[1] > 0.0);
  REQUIRE(out.term_series_per_position.size() == 2);
  out.loss_sum.backward();

  std::vector<std::pair<std::string, torch::Tensor>> tensors{
      {"input_ids", row.input_ids},
      {"features", row.features},
      {"anchors", row.anchors.view({N})},
      {"loss_mask", row.loss_mask},
      {"teacher", row.teacher_pre},
      {"logits", logits},
      {"refined_logits", refined},
      {"tf_loss_sum", torch::full({1}, out.main_loss_sum, torch::kFloat64)},
      {"consistency_loss_sum", torch::full({1}, out.term_loss_sums[0], torch::kFloat64)},
      {"base_anchor_loss_sum", torch::full({1}, out.term_loss_sums[1], torch::kFloat64)},
      {"accept_rate_sum", torch::full({1}, total(out.accept_rate_per_position), torch::kFloat64)},
      {"accuracy_sum", torch::full({1}, total(out.correct_per_position), torch::kFloat64)},
      {"base_accept_rate_sum", torch::full({1}, total(out.term_series_per_position[1]), torch::kFloat64)},
      {"gamma", torch::full({1}, 4.0)},
      {"consistency_weight", torch::full({1}, 0.3)},
      {"consistency_passes", torch::full({1}, 3.0)},
      {"base_anchor_weight", torch::full({1}, 0.6)}};
  add_gradients(*drafter, tensors);
  check_with_speculators("xpress", *drafter, target_dir, tensors);
}

TEST_CASE("Model.Xpress.AFreshRefinerStartsWithItsMixerAtZeroAndIsCountedAndRefusedByTheDFlashLayout") {
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(tiny_target_dir());
  DFlashDrafter drafter(make_drafter_spec(target_config, xpress_options(1, XPressShape{})), 5);
  RefinerHeadImpl& refiner = refiner_head(*drafter);
  CHECK(refiner.mix_l.sizes() == torch::IntArrayRef({256, 8, 8}));
  CHECK(refiner.mix_l.abs().max().item<double>() == 0.0);
  CHECK(refiner.readout->weight.std().item<double>() == doctest::Approx(0.02).epsilon(0.05));
  // The memory fit counts exactly the refiner's parameters.
  int64_t count = 0;
  for (const auto& p : refiner.parameters()) count += p.numel();
  const DrafterKind& kind = drafter_kind("xpress");
  CHECK(kind.parameter_count(drafter->spec()) == count);
  CHECK(kind.activation_floats_per_slot(drafter->spec()) > 0);
  // z-lab's layout would serve it without the refiner.
  CHECK(kind.refuses_format("dflash", drafter->spec().kind_fields).find("--format speculators") != std::string::npos);
  CHECK(kind.refuses_format("speculators", drafter->spec().kind_fields).empty());
}

TEST_CASE("Model.Xpress.GreedyJacobiDraftingEqualsTargetGreedy") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  XPressShape shape;
  shape.xpress_rank = 16;
  shape.num_jacobi_passes = 3;
  DrafterOptions options = xpress_options(1, shape);
  options.block_size = 4;
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 23);
  torch::manual_seed(9);
  enlarge_refiner(*drafter, 30.0);
  torch::manual_seed(12);
  int64_t changed = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const std::vector<int64_t> prompt = random_prompt(3 + 5 * i);
    CAPTURE(i);
    check_greedy_is_lossless(*drafter, target, prompt);
    // The passes' drafts differ from the backbone's own argmax (the
    // refiner's readout zeroed) somewhere.
    DrafterContextCache cache = prefilled_context(*drafter, target, prompt);
    const int64_t previous = prompt[prompt.size() - 2];
    const auto draft = [&] { return drafter_generate_block(*drafter, target, cache, prompt.back(), previous); };
    const std::vector<int64_t> refined = draft();
    const std::vector<int64_t> backbone = drafted_without(refiner_head(*drafter).readout->weight, draft);
    for (size_t k = 0; k < refined.size(); ++k) changed += refined[k] != backbone[k] ? 1 : 0;
  }
  CHECK(changed > 0);
}
