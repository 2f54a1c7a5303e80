// The DFlash objective: anchors, labels, weights, padding, chunking,
// gradients against finite differences, determinism.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "drafter/chunked_cross_entropy.hpp"
#include "drafter/objective.hpp"
#include "target/model_fixtures.hpp"
#include "objective_rig.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

TEST_CASE("Model.Objective.AnchorsAreValidSortedDistinctAndSeeded") {
  Batch batch;
  CHECK(anchor_candidates(batch.loss_mask[0], 12) == std::vector<int64_t>{2, 3, 6, 7, 8, 9, 10});
  CHECK(anchor_candidates(batch.loss_mask[1], 9) == std::vector<int64_t>{4, 5, 6, 7});  // a <= S - 2 = 7

  AnchorSamplingOptions options;
  options.anchors_per_sequence = 5;
  options.seed = 99;
  const AnchorBatch a = sample_anchors(batch.loss_mask, batch.lengths, options);
  CHECK(a.anchor_positions.sizes() == torch::IntArrayRef({2, 5}));
  CHECK(a.block_keep[0].sum().item<int64_t>() == 5);
  CHECK(a.block_keep[1].sum().item<int64_t>() == 4);  // fewer candidates: one padding block
  CHECK_FALSE(a.block_keep[1][4].item<bool>());
  const std::set<int64_t> valid0 = {2, 3, 6, 7, 8, 9, 10};
  std::vector<int64_t> row0;
  for (int64_t i = 0; i < 5; ++i) row0.push_back(a.anchor_positions[0][i].item<int64_t>());
  CHECK(std::is_sorted(row0.begin(), row0.end()));
  CHECK(std::set<int64_t>(row0.begin(), row0.end()).size() == 5);
  for (const int64_t anchor : row0) CHECK(valid0.count(anchor) == 1);

  CHECK(torch::equal(sample_anchors(batch.loss_mask, batch.lengths, options).anchor_positions, a.anchor_positions));
  bool any_differs = false;
  for (int64_t epoch = 1; epoch < 6; ++epoch) {
    options.epoch = epoch;
    any_differs |= !torch::equal(sample_anchors(batch.loss_mask, batch.lengths, options).anchor_positions[0],
                                 a.anchor_positions[0]);
  }
  CHECK(any_differs);  // resampled every epoch
}

TEST_CASE("Model.Objective.BlocksLabelsAndWeights") {
  Batch batch;
  const AnchorBatch anchors = fixed_anchors();
  const double gamma = 7.0;
  const DraftBlocks blocks = build_draft_blocks(batch.input_ids, batch.loss_mask, batch.lengths, anchors, 4,
                                                /*mask_token_id=*/49, gamma, torch::kCPU);
  auto ids = batch.input_ids;
  // Block (0, 1) at anchor 6: [token[6], MASK, MASK, MASK], labels token[6 + k] (no shift).
  CHECK(blocks.block_tokens[0][1][0].item<int64_t>() == ids[0][6].item<int64_t>());
  for (int64_t k = 1; k < 4; ++k) {
    CHECK(blocks.block_tokens[0][1][k].item<int64_t>() == 49);
    CHECK(blocks.labels[0][1][k].item<int64_t>() == ids[0][6 + k].item<int64_t>());
    CHECK(blocks.block_positions[0][1][k].item<int64_t>() == 6 + k);
    CHECK(blocks.weights[0][1][k].item<float>() == doctest::Approx(std::exp(-(k - 1) / gamma)));
  }
  CHECK(blocks.weights[0][1][0].item<float>() == 0.0f);  // slot 0 is the given anchor token
  // Block (0, 0) at anchor 2: slot 3 lands on position 5 where loss_mask == 0.
  CHECK(blocks.weights[0][0][3].item<float>() == 0.0f);
  CHECK(blocks.weights[0][0][2].item<float>() > 0.0f);
  // Block (0, 2) at anchor 9: slots past the end (12) carry no weight.
  CHECK(blocks.weights[0][2][2].item<float>() > 0.0f);
  CHECK(blocks.weights[0][2][3].item<float>() == 0.0f);
  // Block (1, 1) at anchor 7 of a length-9 sample: slot 1 is position 8, slot 2 is padding.
  CHECK(blocks.weights[1][1][1].item<float>() > 0.0f);
  CHECK(blocks.weights[1][1][2].item<float>() == 0.0f);
  // Padding block: nothing.
  CHECK(blocks.weights[1][2].sum().item<float>() == 0.0f);
}

TEST_CASE("Model.Objective.LossIsTheWeightedMeanOfSamePositionCrossEntropy") {
  Rig rig;
  const AnchorBatch anchors = fixed_anchors();
  const ObjectiveOutput out = rig.loss(anchors);

  // Recompute with dense ops: full logits, plain cross-entropy.
  const DraftBlocks blocks = build_draft_blocks(rig.batch.input_ids, rig.batch.loss_mask, rig.batch.lengths, anchors,
                                                4, rig.spec.mask_token_id, 2.0, torch::kCPU);
  const auto plan = plan_block_attention(anchors.anchor_positions, anchors.block_keep, 12, 4, 0, torch::kCPU);
  const torch::Tensor hidden = rig.drafter->forward(rig.features, torch::embedding(rig.embedding, blocks.block_tokens.view({2, 12})),
                                                    blocks.block_positions.view({2, 12}), plan);
  const torch::Tensor logits = at::linear(hidden, rig.lm_head).view({-1, rig.spec.vocab_size});
  const torch::Tensor ce = torch::nn::functional::cross_entropy(
      logits, blocks.labels.view({-1}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor w = blocks.weights.view({-1});
  const double expected = ((ce * w).sum() / w.sum()).item<double>();
  CHECK(out.loss.item<double>() == doctest::Approx(expected).epsilon(1e-5));
  CHECK(out.weight_sum == doctest::Approx(w.sum().item<double>()));
  CHECK(out.loss_sum.item<double>() == doctest::Approx((ce * w).sum().item<double>()).epsilon(1e-5));
  CHECK(out.weighted_ce_sum == doctest::Approx(out.loss_sum.item<double>()));
  CHECK(out.num_anchors == 5);
  CHECK(out.real_tokens == 21);

  // Per-position accuracy: sums over valid slots, slot 0 never counts.
  const torch::Tensor correct = logits.argmax(-1).eq(blocks.labels.view({-1})) & blocks.valid.view({-1});
  CHECK(out.count_per_position[0] == 0.0);
  double counted = 0.0, right = 0.0;
  for (int64_t k = 0; k < 4; ++k) {
    counted += out.count_per_position[k];
    right += out.correct_per_position[k];
    CHECK(out.count_per_position[k] == blocks.valid.select(2, k).sum().item<double>());
  }
  CHECK(counted == static_cast<double>(out.predicted_tokens));
  CHECK(right == correct.sum().item<double>());
}

TEST_CASE("Model.Objective.ChunkingChangesNeitherLossNorGradients") {
  Rig rig;
  const AnchorBatch anchors = fixed_anchors();
  auto run = [&](int64_t attention_blocks, int64_t logits_per_chunk) {
    rig.drafter->zero_grad();
    ObjectiveOptions options;
    options.attention_blocks_per_chunk = attention_blocks;
    options.max_logits_per_chunk = logits_per_chunk;
    ObjectiveOutput out = rig.loss(anchors, options);
    out.loss.backward();
    return std::make_pair(out.loss.item<double>(), rig.drafter->layers->ptr<DraftLayerImpl>(0)->self_attn->k_proj->weight.grad().clone());
  };
  const auto whole = run(100, 1 << 20);
  const auto chunked = run(1, 3 * 50);  // 3 rows of logits at a time
  CHECK(chunked.first == doctest::Approx(whole.first).epsilon(1e-6));
  CHECK(torch::allclose(chunked.second, whole.second, 1e-5, 1e-6));
}

TEST_CASE("Model.Objective.PaddingBlocksGiveFiniteZeros") {
  Rig rig;
  AnchorBatch anchors = fixed_anchors();
  const ObjectiveOutput base = rig.loss(anchors);
  // All-padding micro-batch: loss exactly 0, gradients finite (zero).
  anchors.block_keep.fill_(false);
  ObjectiveOutput empty = rig.loss(anchors);
  CHECK(empty.loss.item<double>() == 0.0);
  CHECK(empty.weight_sum == 0.0);
  empty.loss.backward();
  for (const auto& p : rig.drafter->parameters()) {
    CHECK(torch::isfinite(p.grad()).all().item<bool>());
    CHECK(p.grad().abs().max().item<double>() == 0.0);
  }
  // A sample with no candidate at all gets only padding blocks.
  rig.batch.loss_mask[1].zero_();
  AnchorSamplingOptions sampling;
  sampling.anchors_per_sequence = 3;
  const AnchorBatch sampled = sample_anchors(rig.batch.loss_mask, rig.batch.lengths, sampling);
  CHECK(sampled.block_keep[1].sum().item<int64_t>() == 0);
  rig.drafter->zero_grad();
  ObjectiveOutput out = rig.loss(sampled);
  out.loss.backward();
  CHECK(std::isfinite(out.loss.item<double>()));
  for (const auto& p : rig.drafter->parameters()) CHECK(torch::isfinite(p.grad()).all().item<bool>());
  (void)base;
}

TEST_CASE("Model.Objective.GradientsMatchFiniteDifferences") {
  Rig rig(torch::kFloat64);
  const AnchorBatch anchors = fixed_anchors();
  ObjectiveOptions options;
  options.attention_blocks_per_chunk = 2;
  options.max_logits_per_chunk = 7 * 50;
  rig.drafter->zero_grad();
  rig.loss(anchors, options).loss.backward();

  const auto named = rig.drafter->named_parameters();
  for (const char* name : {"fc.weight", "hidden_norm.weight", "layers.0.self_attn.q_proj.weight",
                           "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
                           "layers.0.self_attn.k_norm.weight", "layers.0.mlp.down_proj.weight", "norm.weight"}) {
    torch::Tensor param = named[name];
    const torch::Tensor grad = param.grad().clone();
    for (const int64_t flat_index : {int64_t{0}, param.numel() / 2, param.numel() - 1}) {
      CAPTURE(name);
      CAPTURE(flat_index);
      const double eps = 1e-6;
      double plus = 0.0, minus = 0.0;
      {
        torch::NoGradGuard no_grad;
        auto flat = param.view({-1});
        const double original = flat[flat_index].item<double>();
        flat[flat_index] = original + eps;
        plus = rig.loss(anchors, options).loss.item<double>();
        flat[flat_index] = original - eps;
        minus = rig.loss(anchors, options).loss.item<double>();
        flat[flat_index] = original;
      }
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = grad.view({-1})[flat_index].item<double>();
      CHECK(analytic == doctest::Approx(numeric).epsilon(1e-6).scale(1e-3));
    }
  }
}

TEST_CASE("Model.Objective.SameSeedSameLossBitForBit") {
  auto run_once = [] {
    Rig rig;
    AnchorSamplingOptions sampling;
    sampling.anchors_per_sequence = 3;
    sampling.seed = 77;
    sampling.epoch = 2;
    sampling.batch_index = 5;
    const AnchorBatch anchors = sample_anchors(rig.batch.loss_mask, rig.batch.lengths, sampling);
    ObjectiveOutput out = rig.loss(anchors);
    out.loss.backward();
    return std::make_pair(out.loss.item<double>(), rig.drafter->fc->weight.grad().sum().item<double>());
  };
  const auto first = run_once();
  const auto second = run_once();
  CHECK(first.first == second.first);
  CHECK(first.second == second.second);
}

TEST_CASE("Model.Objective.ChunkedCrossEntropyMatchesDense") {
  torch::manual_seed(2);
  const torch::Tensor hidden = torch::randn({13, 8}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor head = torch::randn({21, 8}, torch::kFloat64);
  const torch::Tensor labels = torch::randint(0, 21, {13}, torch::kInt64);
  const torch::Tensor weights = torch::rand({13}, torch::kFloat64);
  const auto result = chunked_linear_cross_entropy(hidden, head, labels, weights, 4);
  result.weighted_ce_sum.backward();
  const torch::Tensor chunked_grad = hidden.grad().clone();
  hidden.mutable_grad().zero_();
  const torch::Tensor logits = at::linear(hidden, head);
  const torch::Tensor dense = (torch::nn::functional::cross_entropy(
                                   logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone)) *
                               weights)
                                  .sum();
  dense.backward();
  CHECK(result.weighted_ce_sum.item<double>() == doctest::Approx(dense.item<double>()).epsilon(1e-12));
  CHECK(torch::allclose(chunked_grad, hidden.grad(), 1e-12, 1e-12));
  CHECK(torch::equal(result.predictions, logits.argmax(-1)));
  CHECK_THROWS_AS(chunked_linear_cross_entropy(hidden, head.clone().requires_grad_(true), labels, weights, 4),
                  std::invalid_argument);
}
