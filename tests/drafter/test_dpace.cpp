// D-PACE position weighting: the weights against their closed form, the loss
// against a dense recomputation, no gradient through the weights, and a
// micro-batch (or rank) split that changes nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "drafter/objective.hpp"
#include "objective_rig.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

// w_j = sum_{m >= j} prod_{1 <= i <= m} q~_i, q~_i = (1 - alpha) exp(-CE_i) + alpha,
// written as loops over one block; an invalid slot ends the chain.
std::vector<double> closed_form(const std::vector<double>& ce, const std::vector<bool>& valid, double alpha) {
  const size_t n = ce.size();
  std::vector<double> through(n, 0.0), w(n, 0.0);
  double product = 1.0;
  for (size_t m = 1; m < n; ++m) {
    product *= valid[m] ? (1.0 - alpha) * std::exp(-ce[m]) + alpha : 0.0;
    through[m] = product;
  }
  for (size_t j = 1; j < n; ++j) {
    if (!valid[j]) continue;
    for (size_t m = j; m < n; ++m) w[j] += through[m];
  }
  return w;
}

std::vector<double> weights_of(const std::vector<double>& ce, const std::vector<bool>& valid, double alpha) {
  const auto n = static_cast<int64_t>(ce.size());
  std::vector<uint8_t> v(valid.begin(), valid.end());
  const torch::Tensor w = dpace_position_weights(torch::tensor(ce, torch::kFloat64).view({1, n}),
                                                 torch::tensor(std::vector<int64_t>(v.begin(), v.end())).view({1, n}).to(torch::kBool),
                                                 alpha);
  return {w.data_ptr<double>(), w.data_ptr<double>() + n};
}

// The objective rig's loss under D-PACE, over `rows` rows from `first_row`.
ObjectiveOutput dpace_loss(Rig& rig, double alpha, int64_t first_row = 0, int64_t rows = 2) {
  ObjectiveOptions options;
  options.weighting = PositionWeighting::DPace;
  options.dpace_alpha = alpha;
  const AnchorBatch anchors = fixed_anchors();  // uneven: row 0 keeps 3 blocks, row 1 keeps 2
  AnchorBatch part;
  part.anchor_positions = anchors.anchor_positions.narrow(0, first_row, rows);
  part.block_keep = anchors.block_keep.narrow(0, first_row, rows);
  const auto& b = rig.batch;
  return dflash_loss(*rig.drafter, rig.embedding, rig.lm_head, rig.features.narrow(0, first_row, rows),
                     b.input_ids.narrow(0, first_row, rows), b.loss_mask.narrow(0, first_row, rows),
                     b.lengths.narrow(0, first_row, rows), part, options);
}

torch::Tensor fc_grad(Rig& rig) { return rig.drafter->fc->weight.grad().clone(); }

}  // namespace

TEST_CASE("Model.DPace.weights_match_the_closed_form") {
  // q = [-, 1/2, 1, 1/4], alpha 1/2: q~ = [-, 3/4, 1, 5/8], accepted through m: 3/4, 3/4, 15/32.
  const std::vector<double> ce{0.0, std::log(2.0), 0.0, std::log(4.0)};
  const std::vector<bool> all{false, true, true, true};
  auto w = weights_of(ce, all, 0.5);
  CHECK(w[0] == 0.0);
  CHECK(w[1] == doctest::Approx(0.75 + 0.75 + 15.0 / 32));
  CHECK(w[2] == doctest::Approx(0.75 + 15.0 / 32));
  CHECK(w[3] == doctest::Approx(15.0 / 32));
  // alpha 1: every draft accepted, w_j counts the slots from j on.
  w = weights_of(ce, all, 1.0);
  CHECK(w == std::vector<double>{0.0, 3.0, 2.0, 1.0});
  // An unlabelled slot (past the sample's end) ends the chain.
  w = weights_of(ce, {false, true, false, true}, 0.5);
  CHECK(w == std::vector<double>{0.0, 0.75, 0.0, 0.0});
  // Random blocks against the loops.
  torch::manual_seed(3);
  for (int trial = 0; trial < 20; ++trial) {
    const torch::Tensor random_ce = torch::rand({16}, torch::kFloat64) * 5;
    const torch::Tensor random_valid = torch::rand({16}) > 0.2;
    std::vector<double> c(random_ce.data_ptr<double>(), random_ce.data_ptr<double>() + 16);
    std::vector<bool> v;
    for (int64_t i = 0; i < 16; ++i) v.push_back(i > 0 && random_valid[i].item<bool>());
    const double alpha = 0.05 + 0.95 * trial / 19.0;
    const auto got = weights_of(c, v, alpha), want = closed_form(c, v, alpha);
    for (size_t i = 0; i < 16; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
  CHECK_THROWS_WITH(weights_of(ce, all, 0.0), doctest::Contains("alpha must lie in (0, 1]"));
  CHECK_THROWS_WITH(weights_of(ce, all, 1.5), doctest::Contains("alpha must lie in (0, 1]"));
}

TEST_CASE("Model.DPace.loss_is_the_dpace_weighted_mean_and_the_weights_carry_no_gradient") {
  Rig rig;
  const AnchorBatch anchors = fixed_anchors();
  ObjectiveOutput out = dpace_loss(rig, 0.5);
  out.loss_sum.backward();
  const torch::Tensor got_grad = fc_grad(rig);

  // Dense: full logits, plain CE per slot, the closed form's weights as constants.
  rig.drafter->zero_grad();
  const DraftBlocks blocks = build_draft_blocks(rig.batch.input_ids, rig.batch.loss_mask, rig.batch.lengths, anchors, 4,
                                                rig.spec.mask_token_id, 2.0, torch::kCPU);
  const auto plan = plan_block_attention(anchors.anchor_positions, anchors.block_keep, 12, 4, 0, torch::kCPU);
  const torch::Tensor hidden =
      rig.drafter->forward(rig.features, torch::embedding(rig.embedding, blocks.block_tokens.view({2, 12})),
                           blocks.block_positions.view({2, 12}), plan);
  const torch::Tensor logits = at::linear(hidden, rig.lm_head).view({-1, rig.spec.vocab_size});
  const torch::Tensor ce = torch::nn::functional::cross_entropy(
      logits, blocks.labels.view({-1}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor ce_blocks = ce.detach().to(torch::kFloat64).view({-1, 4});
  const torch::Tensor valid = blocks.valid.view({-1, 4});
  std::vector<double> w;
  for (int64_t b = 0; b < ce_blocks.size(0); ++b) {
    std::vector<double> c;
    std::vector<bool> v;
    for (int64_t k = 0; k < 4; ++k) {
      c.push_back(ce_blocks[b][k].item<double>());
      v.push_back(valid[b][k].item<bool>());
    }
    const auto block = closed_form(c, v, 0.5);
    w.insert(w.end(), block.begin(), block.end());
  }
  const torch::Tensor weights = torch::tensor(w, torch::kFloat64).to(torch::kFloat32);
  const torch::Tensor reference_sum = (ce * weights).sum();
  CHECK(out.weight_sum == doctest::Approx(weights.sum().item<double>()).epsilon(1e-6));
  CHECK(out.weighted_ce_sum == doctest::Approx(reference_sum.item<double>()).epsilon(1e-5));
  CHECK(out.loss.item<double>() == doctest::Approx(reference_sum.item<double>() / weights.sum().item<double>()).epsilon(1e-5));
  // Weights as constants: the gradient is w * dCE/dtheta, nothing through w.
  reference_sum.backward({}, /*retain_graph=*/true);
  CHECK(torch::allclose(got_grad, fc_grad(rig), 1e-4, 1e-6));
  // ... and not the gradient with the weights left attached to the graph.
  rig.drafter->zero_grad();
  const torch::Tensor q = (0.5 * torch::exp(-ce) + 0.5).view({-1, 4}).masked_fill(valid.logical_not(), 0.0);
  const torch::Tensor chained = torch::cat({torch::ones({q.size(0), 1}), q.narrow(1, 1, 3)}, 1).cumprod(1);
  const torch::Tensor attached = chained.flip(1).cumsum(1).flip(1).masked_fill(valid.logical_not(), 0.0).view({-1});
  (ce * attached).sum().backward();
  CHECK_FALSE(torch::allclose(got_grad, fc_grad(rig), 1e-4, 1e-6));
}

TEST_CASE("Model.DPace.a_split_across_micro_batches_or_ranks_changes_nothing") {
  // Rank 0 holds row 0 (3 blocks), rank 1 row 1 (2 blocks): their sums add up
  // to the whole batch's, so the step's sum(w CE) / sum(w), divided by the
  // all-reduced weight sum, is that of one rank with both rows.
  Rig rig;
  ObjectiveOutput whole = dpace_loss(rig, 0.3);
  whole.loss_sum.backward();
  const torch::Tensor whole_grad = fc_grad(rig);
  rig.drafter->zero_grad();
  ObjectiveOutput first = dpace_loss(rig, 0.3, 0, 1);
  first.loss_sum.backward();
  ObjectiveOutput second = dpace_loss(rig, 0.3, 1, 1);
  second.loss_sum.backward();
  CHECK(first.num_anchors == 3);
  CHECK(second.num_anchors == 2);
  // Equal up to float32 rounding: the CE feeding the weights comes from matmuls of other shapes.
  CHECK(first.weight_sum + second.weight_sum == doctest::Approx(whole.weight_sum).epsilon(1e-6));
  CHECK(first.weighted_ce_sum + second.weighted_ce_sum == doctest::Approx(whole.weighted_ce_sum).epsilon(1e-6));
  CHECK(torch::allclose(fc_grad(rig), whole_grad, 1e-5, 1e-7));
  const double step_loss = (first.weighted_ce_sum + second.weighted_ce_sum) / (first.weight_sum + second.weight_sum);
  CHECK(step_loss == doctest::Approx(whole.loss.item<double>()).epsilon(1e-6));
}
