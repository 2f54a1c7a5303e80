// Speculative decoding: lossless against the target's greedy decoding, the
// drafter's context cache equals a full recomputation, and a drafter trained
// with the objective is accepted when drafting (training and drafting agree
// on labels, visibility, positions and the mask token).
#include <doctest/doctest.h>

#include "model/objective.hpp"
#include "model/speculative.hpp"
#include "model_fixtures.hpp"

using namespace dflow::model;
using dflow::model::testing::tiny_target_dir;

namespace {

DFlashDrafter tiny_drafter(const TargetModel& target) {
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.num_target_features = 2;
  return DFlashDrafter(make_drafter_spec(target.config(), options), 17);
}

}  // namespace

TEST_CASE("Model.Speculative.OutputEqualsTargetGreedyDecoding") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
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

TEST_CASE("Model.Speculative.ContextCacheEqualsFullRecomputation") {
  torch::set_num_threads(1);
  const TargetModel target = TargetModel::load(tiny_target_dir());
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
  const TargetModel target = TargetModel::load(tiny_target_dir());
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
