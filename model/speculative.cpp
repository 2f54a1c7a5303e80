#include "model/speculative.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace dflow::model {

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

std::vector<int64_t> drafter_generate_block(DFlashDrafterImpl& drafter, const TargetModel& target,
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
  const BlockAttentionPlan plan = plan_block_attention(torch::full({1, 1}, start, torch::kInt64),
                                                       torch::ones({1, 1}, torch::kBool), start, block_size, 0, device);
  const torch::Tensor hidden =
      drafter.forward_with_context_kv(cache.per_layer(), target.embed(block_tokens).to(device), positions, plan);
  const torch::Tensor drafts = target.lm_head(hidden.narrow(1, 1, block_size - 1).to(target.device())).argmax(-1)[0];
  const torch::Tensor drafts_cpu = drafts.to(torch::kCPU).contiguous();
  return {drafts_cpu.data_ptr<int64_t>(), drafts_cpu.data_ptr<int64_t>() + drafts_cpu.numel()};
}

double SpeculativeResult::mean_acceptance_length() const {
  if (acceptance_lengths.empty()) return 0.0;
  return static_cast<double>(std::accumulate(acceptance_lengths.begin(), acceptance_lengths.end(), int64_t{0})) /
         static_cast<double>(acceptance_lengths.size());
}

SpeculativeResult speculative_generate(DFlashDrafterImpl& drafter, const TargetModel& target,
                                       const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens,
                                       const std::vector<int64_t>& eos_token_ids) {
  torch::NoGradGuard no_grad;
  SpeculativeResult result;
  if (prompt_ids.empty()) throw std::invalid_argument("speculative_generate: empty prompt");
  if (max_new_tokens <= 0) return result;
  const DrafterSpec& spec = drafter.spec();
  const int64_t block_size = spec.block_size, prompt_length = static_cast<int64_t>(prompt_ids.size());
  auto is_eos = [&](int64_t token) {
    return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
  };
  auto features_of = [](const TargetOutput& out) { return torch::cat(out.hidden_states, -1); };  // [1, T, n*H]

  KVCache target_cache = target.new_cache(1, prompt_length + max_new_tokens + block_size);
  const TargetOutput prefill = target.forward_cached(
      target_cache, torch::tensor(prompt_ids, torch::kInt64).unsqueeze(0), spec.target_layer_ids, true);
  DrafterContextCache draft_cache;
  draft_cache.append(drafter, features_of(prefill));
  int64_t bonus = prefill.logits[0][prompt_length - 1].argmax().item<int64_t>();
  result.tokens.push_back(bonus);

  while (static_cast<int64_t>(result.tokens.size()) < max_new_tokens && !is_eos(result.tokens.back())) {
    const int64_t start = target_cache.length();  // position of the bonus token
    std::vector<int64_t> block = {bonus};
    const std::vector<int64_t> drafts = drafter_generate_block(drafter, target, draft_cache, bonus);
    block.insert(block.end(), drafts.begin(), drafts.end());

    // Verify the whole block in one target pass.
    const TargetOutput verify = target.forward_cached(
        target_cache, torch::tensor(block, torch::kInt64).unsqueeze(0), spec.target_layer_ids, true);
    const torch::Tensor posterior = verify.logits[0].argmax(-1).to(torch::kCPU).contiguous();  // [B]
    const int64_t* predicted = posterior.data_ptr<int64_t>();
    int64_t accepted = 0;
    while (accepted + 1 < block_size && block[static_cast<size_t>(accepted + 1)] == predicted[accepted]) ++accepted;

    // Commit block[0 .. accepted]; the target's token at `accepted` is the next bonus.
    target_cache.truncate(start + accepted + 1);
    draft_cache.append(drafter, features_of(verify).narrow(1, 0, accepted + 1));
    result.acceptance_lengths.push_back(accepted + 1);
    for (int64_t i = 1; i <= accepted + 1; ++i) {
      const int64_t token = i <= accepted ? block[static_cast<size_t>(i)] : predicted[accepted];
      if (static_cast<int64_t>(result.tokens.size()) >= max_new_tokens) break;
      result.tokens.push_back(token);
      if (is_eos(token)) break;
    }
    bonus = predicted[accepted];
  }
  return result;
}

}  // namespace dflow::model
