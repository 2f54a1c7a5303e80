#include "drafter/speculative.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "drafter/causal_blocks.hpp"
#include "drafter/kind.hpp"

namespace dflow::drafter {

void DrafterContextCache::append(DFlashDrafterImpl& drafter, const torch::Tensor& context_features) {
  torch::NoGradGuard no_grad;
  if (context_features.dim() != 3 || context_features.size(0) != 1) {
    throw std::invalid_argument("DrafterContextCache::append: features must be [1, T, n*H], got " +
                                c10::str(context_features.sizes()));
  }
  const torch::Device device = drafter.fc->weight.device();
  const std::vector<ContextKV> fresh =
      drafter.context_kv(drafter.project_features(context_features.to(device)), length_);
  if (per_layer_.empty()) {
    per_layer_ = fresh;
  } else {
    for (size_t i = 0; i < per_layer_.size(); ++i) {
      per_layer_[i].keys = torch::cat({per_layer_[i].keys, fresh[i].keys}, 2);
      per_layer_[i].values = torch::cat({per_layer_[i].values, fresh[i].values}, 2);
    }
  }
  length_ += context_features.size(1);
}

namespace {

// Final hidden states of all B slots of one draft pass, [1, B, H] on the drafter's device.
torch::Tensor draft_block_hidden(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                 const DrafterContextCache& cache, int64_t bonus_token) {
  torch::NoGradGuard no_grad;
  const DrafterSpec& spec = drafter.spec();
  if (cache.length() == 0) throw std::invalid_argument("drafter_generate_block: the context cache is empty");
  const torch::Device device = drafter.fc->weight.device();
  const int64_t block_size = spec.block_size, start = cache.length();
  const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);

  torch::Tensor block_tokens = torch::full({1, block_size}, spec.mask_token_id, long_options);
  block_tokens[0][0] = bonus_token;
  const torch::Tensor positions = torch::arange(start, start + block_size, long_options).unsqueeze(0);  // [1, B]
  const torch::Tensor anchor = torch::full({1, 1}, start, torch::kInt64);
  BlockAttentionPlan plan = plan_block_attention(anchor, torch::ones({1, 1}, torch::kBool), start, block_size, 0, device);
  if (drafter_kind(spec.kind).causal_blocks(spec.kind_fields)) make_blocks_causal(plan);  // as in training
  if (spec.any_sliding()) add_sliding_window(plan, anchor, spec.sliding_window);
  drafter.kind_modules().begin_blocks(BlockTokens{block_tokens, {}});  // drafting: no data tokens
  return drafter.forward_with_context_kv(cache.per_layer(), target.embed(block_tokens).to(device), positions, plan);
}

std::vector<int64_t> to_vector(const torch::Tensor& ids) {
  const torch::Tensor cpu = ids.to(torch::kCPU, torch::kInt64).contiguous();
  return {cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel()};
}

// Draws of speculative sampling, from one CPU generator: the same seed gives
// the same tokens on any device (given the same logits).
class Sampler final : public SlotSampler {
 public:
  Sampler(double temperature, uint64_t seed)
      : temperature_(temperature), generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  // softmax(logits / T) in float64 on the CPU, over the last axis.
  torch::Tensor probabilities(const torch::Tensor& logits) const override {
    return torch::softmax(logits.to(torch::kCPU, torch::kFloat64) / temperature_, -1);
  }
  int64_t draw(const torch::Tensor& probabilities) override {  // [V]
    return torch::multinomial(probabilities, 1, /*replacement=*/false, generator_).item<int64_t>();
  }
  std::vector<int64_t> draw_rows(const torch::Tensor& probabilities) override {  // [N, V] -> one draw per row
    return to_vector(torch::multinomial(probabilities, 1, /*replacement=*/false, generator_).view({-1}));
  }
  double uniform() {
    return torch::rand({1}, generator_, torch::TensorOptions().dtype(torch::kFloat64)).item<double>();
  }

 private:
  double temperature_;
  at::Generator generator_;
};

struct Verdict {
  int64_t accepted = 0;  // drafts accepted (0 .. B-1)
  int64_t next = 0;      // the target's token after them: the next bonus
};

// Greedy: the longest prefix of drafts equal to the target's argmax.
Verdict verify_greedy(const std::vector<int64_t>& block, const torch::Tensor& verify_logits) {
  const std::vector<int64_t> predicted = to_vector(verify_logits.argmax(-1));  // [B]
  Verdict v;
  const int64_t block_size = static_cast<int64_t>(block.size());
  while (v.accepted + 1 < block_size && block[static_cast<size_t>(v.accepted + 1)] == predicted[v.accepted]) ++v.accepted;
  v.next = predicted[static_cast<size_t>(v.accepted)];
  return v;
}

// Sampling: draft x_k (drawn from q_k) is accepted with probability
// min(1, p_k(x_k) / q_k(x_k)); the first rejected one is replaced by a draw
// from norm(max(0, p_k - q_k)); after B-1 acceptances the next token is drawn
// from p_B. Each committed token is then distributed exactly as p.
Verdict verify_sampled(const std::vector<int64_t>& block, const torch::Tensor& draft_probabilities,
                       const torch::Tensor& verify_logits, Sampler& sampler) {
  const torch::Tensor p = sampler.probabilities(verify_logits);  // [B, V]
  const auto p_at = p.accessor<double, 2>();
  const auto q_at = draft_probabilities.accessor<double, 2>();     // [B-1, V]
  const int64_t block_size = static_cast<int64_t>(block.size());
  Verdict v;
  for (int64_t k = 1; k < block_size; ++k) {
    const int64_t x = block[static_cast<size_t>(k)];
    if (sampler.uniform() * q_at[k - 1][x] < p_at[k - 1][x]) {
      ++v.accepted;
      continue;
    }
    const torch::Tensor residual = (p[k - 1] - draft_probabilities[k - 1]).clamp_min(0.0);
    const double mass = residual.sum().item<double>();
    v.next = sampler.draw(mass > 0 ? residual / mass : p[k - 1]);
    return v;
  }
  v.next = sampler.draw(p[block_size - 1]);
  return v;
}

// One block of drafts: one backbone pass, then the drafter's kind chooses
// the slots' tokens (the backbone's own way: all in parallel).
BlockDraft draft_block(DFlashDrafterImpl& drafter, const target::TargetModel& target, const DrafterContextCache& cache,
                       int64_t bonus_token, int64_t previous_token, Sampler* sampler, bool want_logits) {
  torch::NoGradGuard no_grad;
  const int64_t slots = drafter.spec().block_size - 1;
  BlockDraftInputs in;
  in.hidden = draft_block_hidden(drafter, target, cache, bonus_token)[0];  // [B, H], drafter's device
  in.backbone_logits = target.lm_head(in.hidden.narrow(0, 1, slots).to(target.device()).unsqueeze(0))[0];  // [B-1, V]
  in.bonus_token = bonus_token;
  in.previous_token = previous_token < 0 ? bonus_token : previous_token;
  in.head = target.lm_head_weight();
  in.sampler = sampler;
  in.want_logits = want_logits;
  return drafter.kind_modules().draft_block(in);
}

}  // namespace

std::vector<int64_t> drafter_generate_block(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                            const DrafterContextCache& cache, int64_t bonus_token,
                                            int64_t previous_token) {
  return draft_block(drafter, target, cache, bonus_token, previous_token, nullptr, false).drafts;
}

torch::Tensor drafter_block_logits(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                   const DrafterContextCache& cache, int64_t bonus_token, int64_t previous_token) {
  return draft_block(drafter, target, cache, bonus_token, previous_token, nullptr, true).logits;
}

double SpeculativeResult::mean_acceptance_length() const {
  if (acceptance_lengths.empty()) return 0.0;
  return static_cast<double>(std::accumulate(acceptance_lengths.begin(), acceptance_lengths.end(), int64_t{0})) /
         static_cast<double>(acceptance_lengths.size());
}

SpeculativeResult speculative_generate(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                       const std::vector<int64_t>& prompt_ids, const SpeculativeOptions& options) {
  torch::NoGradGuard no_grad;
  SpeculativeResult result;
  if (prompt_ids.empty()) throw std::invalid_argument("speculative_generate: empty prompt");
  if (options.temperature < 0)
    throw std::invalid_argument("speculative_generate: temperature must be >= 0 (0: greedy), got " +
                                std::to_string(options.temperature));
  const int64_t max_new_tokens = options.max_new_tokens;
  if (max_new_tokens <= 0) return result;
  const bool sampling = options.temperature > 0;
  Sampler sampler(sampling ? options.temperature : 1.0, options.seed);
  const DrafterSpec& spec = drafter.spec();
  const int64_t block_size = spec.block_size, prompt_length = static_cast<int64_t>(prompt_ids.size());
  const auto& eos = options.eos_token_ids;
  auto is_eos = [&](int64_t token) { return std::find(eos.begin(), eos.end(), token) != eos.end(); };
  auto features_of = [](const target::TargetOutput& out) { return torch::cat(out.hidden_states, -1); };  // [1, T, n*H]

  target::KVCache target_cache = target.new_cache(1, prompt_length + max_new_tokens + block_size);
  const target::TargetOutput prefill = target.forward_cached(
      target_cache, torch::tensor(prompt_ids, torch::kInt64).unsqueeze(0), spec.target_layer_ids, true);
  DrafterContextCache draft_cache;
  draft_cache.append(drafter, features_of(prefill));
  const torch::Tensor last_logits = prefill.logits[0][prompt_length - 1];
  int64_t bonus = sampling ? sampler.draw(sampler.probabilities(last_logits)) : last_logits.argmax().item<int64_t>();
  result.tokens.push_back(bonus);
  if (drafter.kind_modules().predicts_acceptance()) {
    for (auto* v : {&result.verified_per_position, &result.predicted_accept_per_position, &result.accepted_per_position})
      v->assign(static_cast<size_t>(block_size), 0.0);
  }

  while (static_cast<int64_t>(result.tokens.size()) < max_new_tokens && !is_eos(result.tokens.back())) {
    const int64_t start = target_cache.length();  // position of the bonus token
    std::vector<int64_t> block = {bonus};
    // The committed token before the bonus: the prompt's last, then the last one generated before it.
    const int64_t previous =
        result.tokens.size() >= 2 ? result.tokens[result.tokens.size() - 2] : prompt_ids.back();
    BlockDraft drafted =
        draft_block(drafter, target, draft_cache, bonus, previous, sampling ? &sampler : nullptr, false);
    const torch::Tensor& draft_probabilities = drafted.probabilities;  // [B-1, V], sampling only: each draft's q
    block.insert(block.end(), drafted.drafts.begin(), drafted.drafts.end());

    // Verify the whole block in one target pass.
    const target::TargetOutput verify = target.forward_cached(
        target_cache, torch::tensor(block, torch::kInt64).unsqueeze(0), spec.target_layer_ids, true);
    const Verdict verdict = sampling ? verify_sampled(block, draft_probabilities, verify.logits[0], sampler)
                                     : verify_greedy(block, verify.logits[0]);
    const int64_t accepted = verdict.accepted;

    // Commit block[0 .. accepted]; the target's token after them is the next bonus.
    target_cache.truncate(start + accepted + 1);
    draft_cache.append(drafter, features_of(verify).narrow(1, 0, accepted + 1));
    result.acceptance_lengths.push_back(accepted + 1);
    if (!drafted.predicted_accept.empty()) {
      // Slot k was verified on a correct prefix when slots 1 .. k-1 were accepted.
      for (int64_t k = 1; k <= accepted + 1 && k < block_size; ++k) {
        const auto i = static_cast<size_t>(k);
        result.verified_per_position[i] += 1;
        result.predicted_accept_per_position[i] += drafted.predicted_accept[i - 1];
        if (k <= accepted) result.accepted_per_position[i] += 1;
      }
    }
    for (int64_t i = 1; i <= accepted + 1; ++i) {
      const int64_t token = i <= accepted ? block[static_cast<size_t>(i)] : verdict.next;
      if (static_cast<int64_t>(result.tokens.size()) >= max_new_tokens) break;
      result.tokens.push_back(token);
      if (is_eos(token)) break;
    }
    bonus = verdict.next;
  }
  return result;
}

SpeculativeResult speculative_generate(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                                       const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens,
                                       const std::vector<int64_t>& eos_token_ids) {
  SpeculativeOptions options;
  options.max_new_tokens = max_new_tokens;
  options.eos_token_ids = eos_token_ids;
  return speculative_generate(drafter, target, prompt_ids, options);
}

}  // namespace dflow::drafter
