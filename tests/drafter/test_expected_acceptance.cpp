// The records' expected acceptance under a loss that does not read the
// teacher (eval.expected_acceptance): sum min(p, q) under the teacher's p,
// equal to a naive full-softmax reference and to what a teacher loss reports
// on the same batch, while the loss, its gradients and the rate a kind's
// terms train on stay those of the loss alone.
#include <doctest/doctest.h>

#include "drafter/chunked_cross_entropy.hpp"
#include "drafter/drafter.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/objective.hpp"
#include "objective_rig.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

TEST_CASE("Model.ExpectedAcceptance.ChunkedCeGivesTheTeachersOverlapAndChangesNothingElse") {
  torch::set_num_threads(1);
  torch::manual_seed(11);
  const int64_t P = 13, H = 8, V = 29;
  const torch::Tensor w = torch::randn({V, H}, torch::kFloat64);
  const torch::Tensor teacher = torch::randn({P, H}, torch::kFloat64);
  const torch::Tensor labels = torch::randint(0, V, {P}, torch::kInt64);
  const torch::Tensor weights = torch::rand({P}, torch::kFloat64);
  const torch::Tensor h0 = torch::randn({P, H}, torch::kFloat64);
  LossMix expected = LossMix::single("ce");
  expected.expected_acceptance = true;
  for (const int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{100}}) {
    CAPTURE(chunk);
    const torch::Tensor a = h0.clone().requires_grad_(true), b = h0.clone().requires_grad_(true);
    const auto plain = chunked_draft_loss(a, w, nullptr, labels, torch::Tensor(), LossMix::single("ce"), 1.0, weights, chunk);
    const auto with = chunked_draft_loss(b, w, nullptr, labels, teacher, expected, 1.0, weights, chunk);
    plain.weighted_loss_sum.backward();
    with.weighted_loss_sum.backward();
    CHECK(torch::equal(plain.weighted_loss_sum, with.weighted_loss_sum));
    CHECK(torch::equal(plain.row_loss, with.row_loss));
    CHECK(torch::equal(plain.accept_rate, with.accept_rate));  // q(label): what a kind's terms train on
    CHECK(torch::equal(a.grad(), b.grad()));
    CHECK_FALSE(plain.expected_accept_rate.defined());
    REQUIRE(with.expected_accept_rate.defined());
    const torch::Tensor z = at::linear(h0, w), zt = at::linear(teacher, w);
    const torch::Tensor reference = torch::minimum(torch::softmax(z, 1), torch::softmax(zt, 1)).sum(1);
    CHECK(torch::allclose(with.expected_accept_rate, reference, 1e-12, 1e-14));
    // A teacher loss reports the same rate as its own.
    const auto tv = chunked_draft_loss(h0, w, nullptr, labels, teacher, LossMix::single("tv"), 1.0, weights, chunk);
    CHECK(torch::allclose(with.expected_accept_rate, tv.accept_rate, 1e-12, 1e-14));
  }
  // Without the teacher's states it is refused, naming what is missing.
  CHECK_THROWS_WITH_AS(chunked_draft_loss(h0, w, nullptr, labels, torch::Tensor(), expected, 1.0, weights, 4),
                       doctest::Contains("ce with the expected acceptance needs the teacher's hidden states"),
                       std::invalid_argument);
}

TEST_CASE("Model.ExpectedAcceptance.TheObjectiveRecordsItWithoutChangingWhatTrains") {
  const AnchorBatch anchors = fixed_anchors();
  for (const bool heads : {false, true}) {
    CAPTURE(heads);
    auto drafter_of = [&](Rig& rig) {
      if (heads) {
        DrafterSpec spec = rig.spec;
        DraftHeads h;
        h.markov_rank = 3;
        h.confidence = true;  // trains on the main loss's acceptance rate
        set_dspark_heads(spec, h);
        rig.drafter = DFlashDrafter(spec, 8);
      }
    };
    Rig plain_rig, expected_rig, kl_rig;
    drafter_of(plain_rig);
    drafter_of(expected_rig);
    drafter_of(kl_rig);
    torch::manual_seed(5);
    TeacherStates teacher{torch::randn({2, 12, plain_rig.spec.hidden_size})};
    ObjectiveOptions options;
    options.loss_decay_gamma = 2.0;
    const ObjectiveOutput plain =
        dflash_loss(*plain_rig.drafter, plain_rig.embedding, plain_rig.lm_head, plain_rig.features,
                    plain_rig.batch.input_ids, plain_rig.batch.loss_mask, plain_rig.batch.lengths, anchors, options);
    options.expected_acceptance = true;
    CHECK_THROWS_WITH_AS(dflash_loss(*expected_rig.drafter, expected_rig.embedding, expected_rig.lm_head,
                                     expected_rig.features, expected_rig.batch.input_ids, expected_rig.batch.loss_mask,
                                     expected_rig.batch.lengths, anchors, options),
                         doctest::Contains("eval.expected_acceptance"), std::invalid_argument);
    const ObjectiveOutput expected = dflash_loss(
        *expected_rig.drafter, expected_rig.embedding, expected_rig.lm_head, expected_rig.features,
        expected_rig.batch.input_ids, expected_rig.batch.loss_mask, expected_rig.batch.lengths, anchors, options,
        nullptr, &teacher);
    plain.loss.backward();
    expected.loss.backward();
    CHECK(plain.main_loss_sum == expected.main_loss_sum);
    CHECK(plain.term_loss_sums == expected.term_loss_sums);
    for (const auto& item : plain_rig.drafter->named_parameters()) {
      CAPTURE(item.key());
      CHECK(torch::equal(item.value().grad(), expected_rig.drafter->named_parameters()[item.key()].grad()));
    }
    // The rates are the teacher's overlap: what kl at temperature 1 reports on the same batch.
    options.expected_acceptance = false;
    options.loss = LossMix::single("kl");
    const ObjectiveOutput kl = dflash_loss(*kl_rig.drafter, kl_rig.embedding, kl_rig.lm_head, kl_rig.features,
                                           kl_rig.batch.input_ids, kl_rig.batch.loss_mask, kl_rig.batch.lengths,
                                           anchors, options, nullptr, &teacher);
    REQUIRE(expected.accept_rate_per_position.size() == kl.accept_rate_per_position.size());
    bool differs_from_ce = false;
    for (size_t k = 0; k < kl.accept_rate_per_position.size(); ++k) {
      CAPTURE(k);
      CHECK(expected.accept_rate_per_position[k] == doctest::Approx(kl.accept_rate_per_position[k]).epsilon(1e-5));
      differs_from_ce = differs_from_ce || expected.accept_rate_per_position[k] != plain.accept_rate_per_position[k];
    }
    CHECK(differs_from_ce);
  }
}
