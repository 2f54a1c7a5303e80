// What the drafter kinds' tests (DSpark, DFlash2, XPress, DSpine) share: the
// anchored row their reference comparisons run on (speculators' models,
// SpecForge's equations), the backbone's block hidden states and objective
// over it, and the check that a fresh kind computes what DFlash does (a
// DFlash drafter whose weights the kind's drafter takes, two blocks to
// compare them on), and the greedy drafting checks (random prompts, lossless
// decoding, a drafter's context after a prompt, a draft with one tensor
// zeroed).
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "drafter/block_attention.hpp"
#include "drafter/drafter.hpp"
#include "drafter/objective.hpp"
#include "drafter/speculative.hpp"
#include "target/hf_config.hpp"
#include "target/layers.hpp"
#include "target/target.hpp"

namespace dflow::target::testing {

using namespace dflow::drafter;  // the drafter tests' helpers sit beside the target fixtures

// A drafter of `kind` (with its params `fields`) over the tiny target:
// blocks of `block_size`, target layers 0 and 2 (rising, not the last one:
// servable).
inline DrafterOptions kind_options(const std::string& kind, nlohmann::json fields, int64_t num_layers,
                                   int64_t block_size = 8) {
  DrafterOptions options;
  options.num_layers = num_layers;
  options.block_size = block_size;
  options.target_layer_ids = {0, 2};
  options.kind = kind;
  options.kind_fields = std::move(fields);
  return options;
}

// Adds noise of std `scale`, drawn from `seed`, to every trainable parameter
// (frozen values such as DSpine's codes stay as they are).
inline void perturb(DFlashDrafterImpl& drafter, double scale, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : drafter.named_parameters())
    if (item.value().requires_grad()) item.value().add_(torch::randn_like(item.value()) * scale);
}

// One row of `length` tokens below the last two vocabulary ids (the mask
// and eos), anchors at `anchor_list` (speculators' lie below length -
// block), features of the drafter's width, slots 14..16 without a label, and
// a teacher of std 3 through a unit norm. Drawn in `dtype` from the current
// seed.
struct AnchoredRow {
  int64_t length = 0, anchors_n = 0, block = 0;
  torch::Tensor input_ids;   // [1, T]
  torch::Tensor features;    // [1, T, features x H]
  torch::Tensor anchors;     // [1, N]
  torch::Tensor positions;   // [1, N x Bs]: each block's slots
  torch::Tensor loss_mask;   // [1, T]
  torch::Tensor teacher_pre;  // [1, T, H], before the norm
  TeacherStates teacher;

  AnchorBatch anchor_batch() const {
    AnchorBatch batch;
    batch.anchor_positions = anchors;
    batch.block_keep = torch::ones({1, anchors_n}, torch::kBool);
    return batch;
  }
  // [1, N x Bs]: slot 0 of a block is its anchor's token, the others the mask.
  torch::Tensor block_tokens(const DrafterSpec& spec) const {
    torch::Tensor tokens = torch::full({anchors_n, block}, spec.mask_token_id, torch::kInt64);
    tokens.select(1, 0).copy_(input_ids[0].index_select(0, anchors[0]));
    return tokens.view({1, anchors_n * block});
  }
  BlockAttentionPlan plan() const {
    return plan_block_attention(anchors, torch::ones({1, anchors_n}, torch::kBool), length, block, 0, torch::kCPU);
  }
};

inline AnchoredRow anchored_row(const DrafterSpec& spec, const std::vector<int64_t>& anchor_list,
                                torch::Dtype dtype = torch::kFloat32, int64_t length = 48) {
  AnchoredRow row;
  row.length = length;
  row.anchors_n = static_cast<int64_t>(anchor_list.size());
  row.block = spec.block_size;
  const int64_t H = spec.hidden_size;
  row.input_ids = torch::randint(0, spec.vocab_size - 2, {1, length}, torch::kInt64);
  row.features = torch::randn({1, length, spec.num_features() * H}, dtype);
  row.anchors = torch::tensor(anchor_list, torch::kInt64).view({1, row.anchors_n});
  row.positions = (row.anchors.unsqueeze(-1) + torch::arange(row.block, torch::kInt64)).view({1, -1});
  row.loss_mask = torch::ones({1, length}, torch::kInt64);
  row.loss_mask.narrow(1, 14, 3).zero_();  // a few slots without a label
  row.teacher_pre = torch::randn({1, length, H}, dtype) * 3.0;
  row.teacher.final_hidden = dflow::target::rms_norm(row.teacher_pre, torch::ones({H}, dtype), spec.rms_norm_eps);
  return row;
}

// The backbone's block hidden states [N, Bs, H] over the row (no gradient),
// as speculators' _backbone_forward computes them.
inline torch::Tensor block_hidden(DFlashDrafterImpl& drafter, const torch::Tensor& embedding, const AnchoredRow& row) {
  torch::NoGradGuard no_grad;
  const torch::Tensor embeddings = torch::embedding(embedding, row.block_tokens(drafter.spec()));
  return drafter.forward(row.features, embeddings, row.positions, row.plan()).view({row.anchors_n, row.block, -1});
}

// dflow's objective over the row, every block kept.
inline ObjectiveOutput row_objective(DFlashDrafterImpl& drafter, const torch::Tensor& embedding,
                                     const torch::Tensor& lm_head, const AnchoredRow& row,
                                     const ObjectiveOptions& options) {
  return dflash_loss(drafter, embedding, lm_head, row.features, row.input_ids, row.loss_mask,
                     torch::full({1}, row.length, torch::kInt64), row.anchor_batch(), options, nullptr,
                     &row.teacher);
}

// A DFlash drafter of `options` with its own kind replaced by dflash, whose
// parameters `kind_drafter` (built from the same options) takes: the part
// of the kind that is DFlash's then holds the same weights.
inline DFlashDrafter dflash_twin(const dflow::target::HFConfig& target, DrafterOptions options,
                                 DFlashDrafterImpl& kind_drafter) {
  options.kind = "dflash";
  options.kind_fields = nlohmann::json::object();
  DFlashDrafter dflash(make_drafter_spec(target, options), 5);
  torch::NoGradGuard no_grad;
  auto mine = kind_drafter.named_parameters();
  for (const auto& item : dflash->named_parameters()) mine[item.key()].copy_(item.value());
  return dflash;
}

// Two blocks of `block` slots anchored at 2 and 9 in a row of 24 tokens,
// features of two target layers, drawn from seed 4: the input on which a
// fresh kind must compute what DFlash does.
struct TwoBlocks {
  int64_t length = 24, block = 0;
  torch::Tensor features, anchors, positions, embeddings;
  BlockAttentionPlan plan;
};

inline TwoBlocks two_blocks(int64_t hidden, int64_t block) {
  TwoBlocks b;
  b.block = block;
  torch::manual_seed(4);
  b.features = torch::randn({1, b.length, 2 * hidden});
  b.anchors = torch::tensor({{2, 9}}, torch::kInt64);
  b.positions = (b.anchors.unsqueeze(-1) + torch::arange(block, torch::kInt64)).view({1, 2 * block});
  b.embeddings = torch::randn({1, 2 * block, hidden});
  b.plan = plan_block_attention(b.anchors, torch::ones({1, 2}, torch::kBool), b.length, block, 0, torch::kCPU);
  return b;
}

// A prompt of `length` random token ids below 510 (the tiny target's
// vocabulary less its mask and eos), from the current seed.
inline std::vector<int64_t> random_prompt(int64_t length) {
  const torch::Tensor ids = torch::randint(0, 510, {length}, torch::kInt64);
  return {ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()};
}

// Greedy speculative decoding is lossless: `new_tokens` tokens equal to the
// target's own greedy continuation of `prompt`.
inline void check_greedy_is_lossless(DFlashDrafterImpl& drafter, const dflow::target::TargetModel& target,
                                     const std::vector<int64_t>& prompt, int64_t new_tokens = 30) {
  const SpeculativeResult result = speculative_generate(drafter, target, prompt, new_tokens, {});
  CHECK(result.tokens == target.generate(prompt, new_tokens, 0.0, 0, {}));
}

// The drafter's context after the target read `prompt`, as decoding holds it.
inline DrafterContextCache prefilled_context(DFlashDrafterImpl& drafter, const dflow::target::TargetModel& target,
                                             const std::vector<int64_t>& prompt) {
  DrafterContextCache cache;
  const dflow::target::TargetOutput prefill = target.forward(torch::tensor(prompt, torch::kInt64).unsqueeze(0),
                                              drafter.spec().target_layer_ids, false);
  cache.append(drafter, torch::cat(prefill.hidden_states, -1));
  return cache;
}

// What `draft` gives with `weight` zeroed (a kind's own term switched off),
// `weight` restored after.
inline std::vector<int64_t> drafted_without(torch::Tensor& weight, const std::function<std::vector<int64_t>()>& draft) {
  const torch::Tensor kept = weight.detach().clone();
  {
    torch::NoGradGuard no_grad;
    weight.zero_();
  }
  std::vector<int64_t> drafts = draft();
  torch::NoGradGuard no_grad;
  weight.copy_(kept);
  return drafts;
}

}  // namespace dflow::target::testing
