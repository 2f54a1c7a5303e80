// Speculative decoding: lossless against the target's greedy decoding, the
// drafter's context cache equals a full recomputation, a drafter trained
// with the objective is accepted when drafting (training and drafting agree
// on labels, visibility, positions and the mask token), and speculative
// sampling keeps the target's distribution.
#include <doctest/doctest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "drafter/objective.hpp"
#include "drafter/kinds/dflash2/dflash2.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/kinds/xpress/xpress.hpp"
#include "drafter/speculative.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::drafter;
using dflow::target::testing::ScratchDir;
using dflow::target::testing::tiny_target_dir;

namespace {

DFlashDrafter tiny_drafter(const dflow::target::TargetModel& target) {
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.num_target_features = 2;
  return DFlashDrafter(make_drafter_spec(target.config(), options), 17);
}

// A drafter with DSpark heads whose Markov bias is large enough to change
// the drafts (the default init's bias is tiny).
DFlashDrafter heads_drafter(const dflow::target::TargetModel& target, const std::string& markov_type,
                            bool confidence_with_markov = true, int64_t num_target_features = 2) {
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.num_target_features = num_target_features;
  DraftHeads heads;
  heads.markov_rank = 8;
  heads.markov_type = markov_type;
  heads.confidence = true;
  heads.confidence_with_markov = confidence_with_markov;
  set_dspark_heads(options, heads);
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 23);
  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(9);
  for (auto& item : markov_head(*drafter)->named_parameters()) item.value().normal_(0.0, 1.0, generator);
  for (auto& item : confidence_head(*drafter)->named_parameters()) item.value().normal_(0.0, 0.3, generator);
  return drafter;
}

// An XPress drafter whose refiner is large enough to change the drafts
// (a fresh one's bias is tiny).
DFlashDrafter xpress_drafter(const dflow::target::TargetModel& target) {
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.num_target_features = 1;
  options.kind = "xpress";
  XPressShape shape;
  shape.xpress_rank = 8;
  shape.num_jacobi_passes = 2;
  options.kind_fields = xpress_fields(shape);
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 23);
  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(9);
  for (auto& item : refiner_head(*drafter).named_parameters()) item.value().normal_(0.0, 0.5, generator);
  return drafter;
}

// Calibration counts against the cycles' acceptance lengths: slot k was
// verified in the cycles with tau >= k (slots 1 .. k-1 accepted) and
// accepted in those with tau >= k + 1.
void check_calibration(const SpeculativeResult& result, int64_t block_size) {
  REQUIRE(result.verified_per_position.size() == static_cast<size_t>(block_size));
  REQUIRE(result.predicted_accept_per_position.size() == static_cast<size_t>(block_size));
  REQUIRE(result.accepted_per_position.size() == static_cast<size_t>(block_size));
  CHECK(result.verified_per_position[0] == 0);
  for (int64_t k = 1; k < block_size; ++k) {
    const auto i = static_cast<size_t>(k);
    const auto verified = std::count_if(result.acceptance_lengths.begin(), result.acceptance_lengths.end(),
                                        [&](int64_t tau) { return tau >= k; });
    const auto accepted = std::count_if(result.acceptance_lengths.begin(), result.acceptance_lengths.end(),
                                        [&](int64_t tau) { return tau >= k + 1; });
    CAPTURE(k);
    CHECK(result.verified_per_position[i] == static_cast<double>(verified));
    CHECK(result.accepted_per_position[i] == static_cast<double>(accepted));
    CHECK(result.predicted_accept_per_position[i] >= 0.0);
    CHECK(result.predicted_accept_per_position[i] <= result.verified_per_position[i]);
    if (verified > 0) CHECK(result.predicted_accept_per_position[i] > 0.0);
  }
}

}  // namespace

TEST_CASE("Model.Speculative.DsparkGreedyEqualsTargetGreedyAndCountsCalibration") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  for (const std::string type : {"vanilla", "gated", "rnn"}) {
    for (const bool with_markov : {true, false}) {
      CAPTURE(type);
      CAPTURE(with_markov);
      DFlashDrafter drafter = heads_drafter(target, type, with_markov);
      torch::manual_seed(12);
      int64_t cycles = 0;
      for (int64_t i = 0; i < 4; ++i) {
        const torch::Tensor ids = torch::randint(0, 510, {3 + 5 * i}, torch::kInt64);
        const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
        CAPTURE(i);
        const SpeculativeResult result = speculative_generate(*drafter, target, prompt, 30, {});
        CHECK(result.tokens == target.generate(prompt, 30, 0.0, 0, {}));
        check_calibration(result, 4);
        cycles += static_cast<int64_t>(result.acceptance_lengths.size());
      }
      CHECK(cycles > 0);
    }
  }
  // A plain drafter reports no calibration.
  DFlashDrafter plain = tiny_drafter(target);
  const SpeculativeResult result = speculative_generate(*plain, target, {10, 20, 30}, 12, {});
  CHECK(result.verified_per_position.empty());
  CHECK(result.predicted_accept_per_position.empty());
  CHECK(result.accepted_per_position.empty());
}

TEST_CASE("Model.Speculative.DsparkBlockLogitsAreBackbonePlusTheChainsBias") {
  // One backbone pass (the training path over the same block), then slot k's
  // logits = backbone + W2 u_k with u from block_features over the chain
  // [anchor, anchor, draft_1, .., draft_{B-2}] (slot 0's previous token is the anchor).
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  for (const std::string type : {"vanilla", "gated", "rnn"}) {
    CAPTURE(type);
    DFlashDrafter drafter = heads_drafter(target, type);
    torch::manual_seed(3);
    const torch::Tensor ids = torch::randint(0, 500, {1, 9}, torch::kInt64);
    const torch::Tensor features = target.context_features(ids, drafter->spec().target_layer_ids);
    DrafterContextCache cache;
    cache.append(*drafter, features);
    const int64_t anchor = 33;
    const torch::Tensor logits = drafter_block_logits(*drafter, target, cache, anchor);  // [3, V]
    const std::vector<int64_t> drafts = drafter_generate_block(*drafter, target, cache, anchor);
    REQUIRE(logits.sizes() == torch::IntArrayRef({3, target.config().vocab_size}));
    CHECK(torch::equal(torch::tensor(drafts), logits.argmax(-1)));

    torch::NoGradGuard no_grad;
    const int64_t mask = drafter->spec().mask_token_id;
    const torch::Tensor block = torch::tensor({anchor, mask, mask, mask}).unsqueeze(0);
    const auto plan = plan_block_attention(torch::full({1, 1}, 9, torch::kInt64), torch::ones({1, 1}, torch::kBool), 9,
                                           4, 0, torch::kCPU);
    const torch::Tensor hidden =
        drafter->forward(features, target.embed(block), (torch::arange(4, torch::kInt64) + 9).unsqueeze(0), plan);
    const torch::Tensor backbone = target.lm_head(hidden.narrow(1, 1, 3))[0];
    const torch::Tensor chain = torch::tensor({anchor, anchor, drafts[0], drafts[1]}).unsqueeze(0);
    const torch::Tensor bias = markov_head(*drafter)->bias(markov_head(*drafter)->block_features(chain, hidden))[0];
    const torch::Tensor expected = backbone + bias.narrow(0, 1, 3);
    CHECK(torch::allclose(logits, expected, 1e-5, 1e-5));
    // The bias decides: without it the drafts would differ somewhere.
    CHECK_FALSE(torch::equal(backbone.argmax(-1), logits.argmax(-1)));
  }
}

TEST_CASE("Model.Speculative.OutputEqualsTargetGreedyDecoding") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DFlashDrafter drafter = tiny_drafter(target);
  const std::vector<int64_t> prompt = {10, 20, 30, 40, 50, 60};
  const std::vector<int64_t> greedy = target.generate(prompt, 40, 0.0, 0, {});
  const SpeculativeResult result = speculative_generate(*drafter, target, prompt, 40, {});
  CHECK(result.tokens == greedy);
  int64_t total = 0;
  for (const int64_t tau : result.acceptance_lengths) {
    CHECK(tau >= 1);
    CHECK(tau <= 4);
    total += tau;
  }
  CHECK(total >= 39);  // every cycle commits tau tokens after the first bonus
  CHECK(result.mean_acceptance_length() >= 1.0);

  const auto stopped = speculative_generate(*drafter, target, prompt, 40, {greedy[5]});
  CHECK(stopped.tokens == std::vector<int64_t>(greedy.begin(), greedy.begin() + 6));
}

TEST_CASE("Model.Speculative.GreedyEqualsTargetGreedyOnEveryPromptOfASet") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DFlashDrafter drafter = tiny_drafter(target);
  torch::manual_seed(12);
  for (int64_t i = 0; i < 12; ++i) {
    const torch::Tensor ids = torch::randint(0, 510, {3 + 4 * i}, torch::kInt64);
    const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    CAPTURE(i);
    CHECK(speculative_generate(*drafter, target, prompt, 30, {}).tokens == target.generate(prompt, 30, 0.0, 0, {}));
  }
}

namespace {

// Chi-square statistic of observed counts against expected probabilities,
// bins with fewer than 5 expected pooled into one; returns {statistic, df}.
std::pair<double, int64_t> chi_square(const std::vector<int64_t>& observed, const torch::Tensor& expected_probabilities,
                                      int64_t samples) {
  double statistic = 0, pooled_observed = 0, pooled_expected = 0;
  int64_t bins = 0;
  for (size_t v = 0; v < observed.size(); ++v) {
    const double expected = expected_probabilities[static_cast<int64_t>(v)].item<double>() * static_cast<double>(samples);
    if (expected < 5) {
      pooled_observed += static_cast<double>(observed[v]), pooled_expected += expected;
      continue;
    }
    statistic += std::pow(static_cast<double>(observed[v]) - expected, 2) / expected, ++bins;
  }
  if (pooled_expected > 0) statistic += std::pow(pooled_observed - pooled_expected, 2) / pooled_expected, ++bins;
  return {statistic, bins - 1};
}

// The chi-square quantile with upper tail ~1e-6 (Wilson-Hilferty).
double chi_square_critical(int64_t df) {
  const double k = static_cast<double>(df), z = 4.75;
  return k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3);
}

}  // namespace

namespace {
// The drafter under test, for the target and its drafter options.
using DrafterMaker = std::function<DFlashDrafter(const dflow::target::TargetModel&, const DrafterOptions&)>;
void check_sampling_keeps_the_target_distribution(const DrafterMaker& make);
}

TEST_CASE("Model.Speculative.SamplingKeepsTheTargetDistribution") {
  check_sampling_keeps_the_target_distribution(
      [](const dflow::target::TargetModel& target, const DrafterOptions& options) {
        return DFlashDrafter(make_drafter_spec(target.config(), options), 5);
      });
}

TEST_CASE("Model.Speculative.DsparkSamplingKeepsTheTargetDistribution") {
  // The drafts come from q including the Markov bias of the token sampled
  // at the slot before; acceptance must use that q.
  check_sampling_keeps_the_target_distribution([](const dflow::target::TargetModel& target, const DrafterOptions&) {
    return heads_drafter(target, "rnn", true, 1);
  });
}

TEST_CASE("Model.Speculative.Dflash2SamplingKeepsTheTargetDistribution") {
  // DFlash2 samples from the selector's scores over the backbone's top k
  // (zero elsewhere): acceptance must use that q, and the residual gives
  // the target's mass outside the candidates.
  check_sampling_keeps_the_target_distribution([](const dflow::target::TargetModel& target, DrafterOptions options) {
    DFlash2Shape shape;
    shape.conv_group_size = 8;
    shape.selector_rank = 8;
    shape.selector_top_k = 6;
    options.kind = "dflash2";
    options.kind_fields = dflash2_fields(shape);
    DFlashDrafter drafter(make_drafter_spec(target.config(), options), 5);
    torch::NoGradGuard no_grad;  // off the identity convolutions and near-zero codebooks
    torch::manual_seed(4);
    for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.05);
    return drafter;
  });
}

TEST_CASE("Model.Speculative.XpressSamplingKeepsTheTargetDistribution") {
  // The drafts come from the last Jacobi pass's refined q; acceptance must use that q.
  check_sampling_keeps_the_target_distribution(
      [](const dflow::target::TargetModel& target, const DrafterOptions&) { return xpress_drafter(target); });
}

namespace {
void check_sampling_keeps_the_target_distribution(const DrafterMaker& make) {
  // Exact marginals of the 2nd and 3rd sampled tokens (the first two drafted
  // positions) on a target small enough to enumerate, against the tokens of
  // 3000 seeded speculative runs with an untrained drafter, whose
  // distribution differs from the target's: both the acceptance and the
  // residual branch decide the outcome. Seeds are fixed: the test is
  // deterministic; the bound is the chi-square 1e-6 quantile.
  torch::set_num_threads(1);
  ScratchDir dir("sampling-target");
  dflow::target::TinyTargetOptions tiny;
  tiny.out_dir = dir.path();
  tiny.num_layers = 2;
  tiny.hidden_size = 32;
  tiny.intermediate_size = 64;
  tiny.vocab_size = 24;
  tiny.seed = 11;
  dflow::target::make_tiny_target(tiny);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir.path());
  DrafterOptions drafter_options;
  drafter_options.block_size = 4;
  drafter_options.num_target_features = 1;
  DFlashDrafter drafter = make(target, drafter_options);
  const double temperature = 3.0;
  const std::vector<int64_t> prompt = {3, 7, 1, 9, 12};
  const int64_t vocab = target.config().vocab_size, prompt_length = static_cast<int64_t>(prompt.size());

  // Exact: p(t1), p(t2 | t1), p(t3 | t1, t2) by enumeration.
  torch::NoGradGuard no_grad;
  auto probabilities = [&](const torch::Tensor& logits) { return torch::softmax(logits.to(torch::kFloat64) / temperature, -1); };
  const torch::Tensor base = torch::tensor(prompt, torch::kInt64);
  const torch::Tensor p1 = probabilities(target.forward(base.unsqueeze(0), {}, true).logits[0][prompt_length - 1]);  // [V]
  const torch::Tensor all = torch::arange(vocab, torch::kInt64);
  const torch::Tensor two = torch::cat({base.unsqueeze(0).expand({vocab, prompt_length}), all.unsqueeze(1)}, 1);
  const torch::Tensor p2_given = probabilities(target.forward(two, {}, true).logits.select(1, prompt_length));  // [V, V]
  const torch::Tensor three = torch::cat({two.repeat_interleave(vocab, 0), all.repeat(vocab).unsqueeze(1)}, 1);
  const torch::Tensor p3_given = probabilities(target.forward(three, {}, true).logits.select(1, prompt_length + 1))
                                     .view({vocab, vocab, vocab});  // [t1, t2, t3]
  const torch::Tensor joint12 = p1.unsqueeze(1) * p2_given;       // [t1, t2]
  const torch::Tensor p2 = joint12.sum(0);
  const torch::Tensor p3 = (joint12.unsqueeze(2) * p3_given).sum({0, 1});

  const int64_t runs = 3000;
  std::vector<int64_t> count2(static_cast<size_t>(vocab)), count3(static_cast<size_t>(vocab));
  int64_t accepted = 0, drafted = 0;
  SpeculativeOptions options;
  options.max_new_tokens = 3;
  options.temperature = temperature;
  for (int64_t run = 0; run < runs; ++run) {
    options.seed = 1000 + static_cast<uint64_t>(run);
    const SpeculativeResult result = speculative_generate(*drafter, target, prompt, options);
    REQUIRE(result.tokens.size() == 3);
    count2[static_cast<size_t>(result.tokens[1])]++;
    count3[static_cast<size_t>(result.tokens[2])]++;
    accepted += result.acceptance_lengths.front() - 1;
    drafted += 3;
  }
  const double acceptance = static_cast<double>(accepted) / static_cast<double>(drafted);
  CAPTURE(acceptance);
  CHECK(acceptance > 0.05);  // both branches are exercised
  CHECK(acceptance < 0.9);
  for (const auto& [name, counts, exact] : {std::tuple{std::string("2nd token"), &count2, p2}, std::tuple{std::string("3rd token"), &count3, p3}}) {
    const auto [statistic, df] = chi_square(*counts, exact, runs);
    INFO(name << ": chi-square " << statistic << " with " << df << " degrees of freedom, bound "
              << chi_square_critical(df));
    CHECK(df >= 5);
    CHECK(statistic < chi_square_critical(df));
  }

  // The same seed gives the same tokens; sampling is not greedy decoding.
  options.seed = 77;
  options.max_new_tokens = 20;
  CHECK(speculative_generate(*drafter, target, prompt, options).tokens ==
        speculative_generate(*drafter, target, prompt, options).tokens);
  options.temperature = -1;
  CHECK_THROWS_WITH(speculative_generate(*drafter, target, prompt, options), doctest::Contains("temperature must be >= 0"));
}
}  // namespace

TEST_CASE("Model.Speculative.ContextCacheEqualsFullRecomputation") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DFlashDrafter drafter = tiny_drafter(target);
  torch::manual_seed(3);
  const torch::Tensor ids = torch::randint(0, 500, {1, 9}, torch::kInt64);
  const torch::Tensor features = target.context_features(ids, drafter->spec().target_layer_ids);

  DrafterContextCache cache;
  cache.append(*drafter, features.narrow(1, 0, 5));
  cache.append(*drafter, features.narrow(1, 5, 4));
  CHECK(cache.length() == 9);
  const std::vector<int64_t> drafts = drafter_generate_block(*drafter, target, cache, 33);

  // The same block through the training path: one block at anchor 9 over the whole context.
  torch::NoGradGuard no_grad;
  const int64_t mask = drafter->spec().mask_token_id;
  const torch::Tensor block = torch::tensor({int64_t{33}, mask, mask, mask}).unsqueeze(0);
  const auto plan = plan_block_attention(torch::full({1, 1}, 9, torch::kInt64), torch::ones({1, 1}, torch::kBool), 9, 4,
                                         0, torch::kCPU);
  const torch::Tensor hidden =
      drafter->forward(features, target.embed(block), (torch::arange(4, torch::kInt64) + 9).unsqueeze(0), plan);
  const torch::Tensor expected = target.lm_head(hidden.narrow(1, 1, 3)).argmax(-1)[0];
  CHECK(torch::equal(torch::tensor(drafts), expected));
}

TEST_CASE("Model.Speculative.TrainedDrafterIsAcceptedEndToEnd") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DFlashDrafter drafter = tiny_drafter(target);
  // Eight prompts with the target's own greedy responses (the paper's data recipe).
  const int64_t samples = 8, prompt_length = 8, response_length = 24, length = prompt_length + response_length;
  torch::manual_seed(1);
  const torch::Tensor prompts = torch::randint(0, 500, {samples, prompt_length}, torch::kInt64);
  torch::Tensor input_ids = torch::zeros({samples, length}, torch::kInt64);
  std::vector<std::vector<int64_t>> prompt_lists;
  for (int64_t i = 0; i < samples; ++i) {
    const torch::Tensor row = prompts[i].contiguous();
    prompt_lists.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + prompt_length);
    const std::vector<int64_t> response = target.generate(prompt_lists.back(), response_length, 0.0, 0, {});
    input_ids[i].narrow(0, 0, prompt_length).copy_(row);
    input_ids[i].narrow(0, prompt_length, response_length).copy_(torch::tensor(response));
  }
  torch::Tensor loss_mask = torch::zeros({samples, length}, torch::kInt64);
  loss_mask.narrow(1, prompt_length, response_length).fill_(1);
  const torch::Tensor lengths = torch::full({samples}, length, torch::kInt64);
  const torch::Tensor features = target.context_features(input_ids, drafter->spec().target_layer_ids);

  auto mean_tau = [&] {
    double total = 0.0;
    for (const auto& prompt : prompt_lists) {
      total += speculative_generate(*drafter, target, prompt, response_length, {}).mean_acceptance_length();
    }
    return total / static_cast<double>(prompt_lists.size());
  };
  const double tau_before = mean_tau();

  torch::optim::AdamW optimizer(drafter->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  ObjectiveOptions objective;
  objective.loss_decay_gamma = 2.0;
  double first_loss = 0.0, last_loss = 0.0;
  for (int64_t step = 0; step < 60; ++step) {
    AnchorSamplingOptions sampling;
    sampling.anchors_per_sequence = 16;
    sampling.batch_index = step;
    const AnchorBatch anchors = sample_anchors(loss_mask, lengths, sampling);
    optimizer.zero_grad();
    ObjectiveOutput out = dflash_loss(*drafter, target, features, input_ids, loss_mask, lengths, anchors, objective);
    out.loss.backward();
    optimizer.step();
    (step == 0 ? first_loss : last_loss) = out.loss.item<double>();
  }
  const double tau_after = mean_tau();
  CAPTURE(tau_before);
  CAPTURE(tau_after);
  CHECK(last_loss < first_loss / 10.0);
  CHECK(tau_before < 1.5);
  CHECK(tau_after > 3.0);  // block 4: at most 4
}
