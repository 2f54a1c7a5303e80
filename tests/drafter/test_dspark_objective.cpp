// DSpark's objective: chunked_draft_loss (CE and KL, Markov bias, acceptance
// rate) against a naive float64 full-softmax reference; dflash_loss with
// the heads; the heads' config round trip.
#include <doctest/doctest.h>

#include <filesystem>

#include "error_of.hpp"
#include "drafter/chunked_cross_entropy.hpp"
#include "drafter/cpu_memory_counter.hpp"
#include "drafter/drafter.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/kinds/dspark/limits.hpp"
#include "drafter/objective.hpp"
#include "objective_rig.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

struct Naive {
  torch::Tensor sum, rows, accept;
};

// Full [P, V] float64 logits: CE on labels, or KL(p_T || q_T), and 1 - TV at T = 1.
Naive naive(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& f, const torch::Tensor& b,
            const torch::Tensor& labels, const torch::Tensor& teacher, double t, const torch::Tensor& weights) {
  const torch::Tensor z = at::linear(h, w) + at::linear(f, b);
  Naive out;
  if (teacher.defined()) {
    const torch::Tensor zt = at::linear(teacher, w);
    const torch::Tensor lq = torch::log_softmax(z / t, 1), lp = torch::log_softmax(zt / t, 1);
    out.rows = (lp.exp() * (lp - lq)).sum(1);
    out.accept = torch::minimum(torch::softmax(z, 1), torch::softmax(zt, 1)).sum(1);
  } else {
    const torch::Tensor lq = torch::log_softmax(z, 1);
    out.rows = -lq.gather(1, labels.unsqueeze(1)).squeeze(1);
    out.accept = (-out.rows).exp();
  }
  out.sum = (out.rows * weights).sum();
  return out;
}

}  // namespace

TEST_CASE("Model.DsparkObjective.ChunkedDraftLossEqualsNaiveReference") {
  torch::set_num_threads(1);
  torch::manual_seed(3);
  const int64_t P = 11, H = 8, V = 23, r = 4;
  const torch::Tensor w = torch::randn({V, H}, torch::kFloat64);
  const torch::Tensor teacher = torch::randn({P, H}, torch::kFloat64);
  const torch::Tensor labels = torch::randint(0, V, {P}, torch::kInt64);
  const torch::Tensor weights = torch::rand({P}, torch::kFloat64);
  for (const bool kl : {false, true}) {
    for (const double t : {1.0, 2.0}) {
      for (const int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{100}}) {
        CAPTURE(kl);
        CAPTURE(t);
        CAPTURE(chunk);
        const torch::Tensor h = torch::randn({P, H}, torch::kFloat64).requires_grad_(true);
        const torch::Tensor f = torch::randn({P, r}, torch::kFloat64).requires_grad_(true);
        const torch::Tensor b = torch::randn({V, r}, torch::kFloat64).requires_grad_(true);
        LogitsBias bias{f, b};
        const auto got = chunked_draft_loss(h, w, &bias, labels, kl ? teacher : torch::Tensor(), t, weights, chunk);
        got.weighted_loss_sum.backward();
        const auto gh = h.grad().clone(), gf = f.grad().clone(), gb = b.grad().clone();
        h.mutable_grad().zero_();
        f.mutable_grad().zero_();
        b.mutable_grad().zero_();
        const Naive ref = naive(h, w, f, b, labels, kl ? teacher : torch::Tensor(), t, weights);
        ref.sum.backward();
        CHECK(got.weighted_loss_sum.item<double>() == doctest::Approx(ref.sum.item<double>()).epsilon(1e-12));
        CHECK(torch::allclose(got.row_loss, ref.rows, 1e-10, 1e-12));
        CHECK(torch::allclose(got.accept_rate, ref.accept.detach(), 1e-10, 1e-12));
        CHECK(torch::allclose(gh, h.grad(), 1e-10, 1e-12));
        CHECK(torch::allclose(gf, f.grad(), 1e-10, 1e-12));
        CHECK(torch::allclose(gb, b.grad(), 1e-10, 1e-12));
      }
    }
  }
}

TEST_CASE("Model.DsparkObjective.HeadsGetGradientsAndPlainCeIsUnchanged") {
  Rig plain;
  const AnchorBatch anchors = fixed_anchors();
  const ObjectiveOutput base = plain.loss(anchors);
  CHECK(base.weighted_ce_sum == base.main_loss_sum);
  CHECK(base.term_loss_sums.empty());

  for (const char* type : {"vanilla", "gated", "rnn"}) {
    CAPTURE(type);
    Rig rig;
    DrafterSpec spec = rig.spec;
    DraftHeads heads;
    heads.markov_rank = 3;
    heads.markov_type = type;
    heads.confidence = true;
    set_dspark_heads(spec, heads);
    rig.drafter = DFlashDrafter(spec, 8);
    ObjectiveOptions options;
    options.loss_decay_gamma = 2.0;
    ObjectiveOutput out = dflash_loss(*rig.drafter, rig.embedding, rig.lm_head, rig.features, rig.batch.input_ids,
                                      rig.batch.loss_mask, rig.batch.lengths, anchors, options);
    out.loss.backward();
    for (const char* name : {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight",
                             "confidence_head.proj.weight", "confidence_head.proj.bias"}) {
      CAPTURE(name);
      CHECK(rig.drafter->named_parameters()[name].grad().abs().sum().item<double>() > 0.0);
    }
    CHECK(out.weighted_ce_sum ==
          doctest::Approx(out.main_loss_sum + 1.0 * out.term_loss_sums.at(0)).epsilon(1e-6));
    double accept = 0, count = 0;
    for (size_t k = 0; k < out.accept_rate_per_position.size(); ++k) {
      accept += out.accept_rate_per_position[k];
      count += out.count_per_position[k];
    }
    CHECK(accept > 0.0);
    CHECK(accept <= count);

    // KL needs a teacher; KL and D-PACE do not combine.
    options.loss = LossMix::single("kl");
    CHECK_THROWS_WITH_AS(dflash_loss(*rig.drafter, rig.embedding, rig.lm_head, rig.features, rig.batch.input_ids,
                                     rig.batch.loss_mask, rig.batch.lengths, anchors, options),
                         doctest::Contains("needs the target's last hidden state"), std::invalid_argument);
    TeacherStates teacher{torch::randn({2, 12, spec.hidden_size})};
    const ObjectiveOutput kl = dflash_loss(*rig.drafter, rig.embedding, rig.lm_head, rig.features, rig.batch.input_ids,
                                           rig.batch.loss_mask, rig.batch.lengths, anchors, options, nullptr, &teacher);
    CHECK(std::isfinite(kl.main_loss_sum));
    CHECK(kl.main_loss_sum >= 0.0);
    options.weighting = PositionWeighting::DPace;
    CHECK_THROWS_WITH_AS(dflash_loss(*rig.drafter, rig.embedding, rig.lm_head, rig.features, rig.batch.input_ids,
                                     rig.batch.loss_mask, rig.batch.lengths, anchors, options, nullptr, &teacher),
                         doctest::Contains("D-PACE"), std::invalid_argument);
  }
}

TEST_CASE("Model.DsparkObjective.HeadsSurviveSaveAndLoad") {
  DrafterSpec spec = small_drafter_spec(1, 4, 2);
  DraftHeads heads;
  heads.markov_rank = 5;
  heads.markov_type = "rnn";
  heads.confidence = true;
  set_dspark_heads(spec, heads);
  DFlashDrafter drafter(spec, 3);
  const auto dir = std::filesystem::temp_directory_path() / ("dspark_heads_" + std::to_string(::getpid()));
  save_pretrained(*drafter, dir);
  const DFlashDrafter loaded = load_pretrained(dir);
  CHECK(dspark_heads(loaded->spec()) == heads);
  const auto expected = drafter->named_parameters();
  for (const auto& item : loaded->named_parameters()) CHECK(torch::equal(item.value(), expected[item.key()]));
  CHECK(loaded->named_parameters().size() == expected.size());
  // Plain DFlash writes no head fields.
  CHECK_FALSE(drafter_config_json(small_drafter_spec(1, 4, 2), torch::kFloat32).contains("markov_rank"));
  std::filesystem::remove_all(dir);
}

// A config.json whose Markov head would not fit (its factors [V, rank]) is
// refused naming the file, the value and the bound, before anything allocates.
TEST_CASE("Model.DsparkObjective.AnOversizedMarkovRankIsRefused") {
  DrafterSpec spec = small_drafter_spec(1, 4, 2);
  DraftHeads heads;
  heads.markov_rank = 8;
  set_dspark_heads(spec, heads);
  nlohmann::json config = drafter_config_json(spec, torch::kFloat32);
  config["markov_rank"] = 1000000000;
  const std::string e = dflow::testing::error_of([&] { drafter_spec_from_config(config, "exported/config.json"); });
  CHECK_MESSAGE(e.find("drafter config 'exported/config.json'") != std::string::npos, e);
  CHECK_MESSAGE(e.find("markov_rank must lie in [1, 4096] for a Markov head (0: none), got 1000000000") !=
                    std::string::npos,
                e);
  config["markov_rank"] = kMaxMarkovRank;
  CHECK(dspark_heads(drafter_spec_from_config(config, "exported/config.json")).markov_rank == 4096);
}

// The heads' fields are written once: the default export (and checkpoints)
// and the speculators export say the same, confidence_head_with_markov false
// without a confidence head however DraftHeads holds it.
TEST_CASE("Model.DsparkObjective.BothExportsWriteTheSameHeadFields") {
  DrafterSpec spec = small_drafter_spec(1, 4, 2);
  spec.target_layer_ids = {1, 3};  // rising, not the target's last: servable
  dflow::target::HeadConfig verifier;
  verifier.hidden_size = spec.hidden_size;
  verifier.vocab_size = spec.vocab_size;
  verifier.num_hidden_layers = spec.num_target_layers;
  verifier.architectures = {"Qwen3ForCausalLM"};
  struct Case {
    int64_t markov_rank;
    bool confidence, confidence_with_markov, written_with_markov;
  };
  for (const Case c : {Case{8, false, true, false}, Case{8, true, true, true}, Case{8, true, false, false},
                       Case{0, true, false, false}}) {
    CAPTURE(c.markov_rank);
    CAPTURE(c.confidence);
    CAPTURE(c.confidence_with_markov);
    DraftHeads heads;
    heads.markov_rank = c.markov_rank;
    heads.confidence = c.confidence;
    heads.confidence_with_markov = c.confidence_with_markov;
    set_dspark_heads(spec, heads);
    const nlohmann::json dflash = drafter_config_json(spec, torch::kFloat32);
    const nlohmann::json speculators = speculators_config_json(spec, torch::kFloat32, verifier, "org/target");
    for (const char* key : {"markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"}) {
      CAPTURE(key);
      REQUIRE(dflash.contains(key));
      CHECK(dflash[key] == speculators[key]);
    }
    CHECK(dflash["confidence_head_with_markov"] == c.written_with_markov);
  }
}

// The kl loss holds what the fused cross-entropy holds: a chunk of logits at a
// time (the teacher's chunk besides the draft's), never the [rows, V]
// float32 matrix, at Qwen3's vocabulary (151936). Peak bytes of the CPU
// allocator over the loss and its backward, inputs allocated before.
TEST_CASE("Model.DsparkObjective.KlHoldsChunksNotTheFullLogits") {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  const int64_t P = 512, H = 64, V = 151936, rows_per_chunk = 32;
  const torch::Tensor w = torch::randn({V, H}) * 0.05;
  const torch::Tensor teacher = torch::randn({P, H});
  const torch::Tensor labels = torch::randint(0, V, {P}, torch::kInt64);
  const torch::Tensor weights = torch::ones({P});
  auto peak = [&](bool kl) {
    const torch::Tensor h = torch::randn({P, H}).requires_grad_(true);
    CpuMemoryCounter counter;
    const auto r = chunked_draft_loss(h, w, nullptr, labels, kl ? teacher : torch::Tensor(), 1.0, weights,
                                      rows_per_chunk);
    r.weighted_loss_sum.backward();
    return counter.peak_bytes();
  };
  const int64_t ce = peak(false), kl = peak(true);
  const int64_t full = P * V * 4, chunk = rows_per_chunk * V * 4;
  CAPTURE(ce);
  CAPTURE(kl);
  CAPTURE(chunk);
  // Both stay within a few chunks of logits (their temporaries), far below
  // the full matrix; kl holds at most the teacher's chunk and its softmax more.
  CHECK(ce <= 4 * chunk);
  CHECK(kl <= 6 * chunk);
  CHECK(kl <= ce + 2 * chunk);
  CHECK(kl * 4 < full);
}
