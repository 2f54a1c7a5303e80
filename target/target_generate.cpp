// Autoregressive generation with the KV cache: greedy or temperature sampling.
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

#include "target/target.hpp"

namespace dflow::target {

namespace {

// Sampling happens on the CPU with a CPU generator, so the same seed gives
// the same tokens whatever device ran the model (given the same logits).
int64_t pick_token(const torch::Tensor& last_logits, double temperature, at::Generator& generator) {
  const torch::Tensor logits = last_logits.to(torch::kCPU, torch::kFloat32);  // [V]
  if (temperature <= 0.0) return logits.argmax().item<int64_t>();
  const torch::Tensor probabilities = torch::softmax(logits / temperature, -1);
  return torch::multinomial(probabilities, 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace

std::vector<int64_t> TargetModel::generate(const std::vector<int64_t>& prompt_ids, int64_t max_new_tokens,
                                           double temperature, uint64_t seed,
                                           const std::vector<int64_t>& eos_token_ids) const {
  return generate_with_features(prompt_ids, max_new_tokens, temperature, seed, eos_token_ids, {}).tokens;
}

TargetModel::Generation TargetModel::generate_with_features(const std::vector<int64_t>& prompt_ids,
                                                            int64_t max_new_tokens, double temperature, uint64_t seed,
                                                            const std::vector<int64_t>& eos_token_ids,
                                                            const std::vector<int64_t>& layer_ids) const {
  if (prompt_ids.empty()) throw std::invalid_argument("TargetModel::generate: empty prompt");
  for (const int64_t id : prompt_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      throw std::out_of_range("TargetModel::generate: prompt token " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(config_.vocab_size));
    }
  }
  Generation result;
  if (max_new_tokens <= 0) return result;
  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t prompt_length = static_cast<int64_t>(prompt_ids.size());
  // Capacity for the prompt and every new token: with features the last
  // token is fed too.
  KVCache cache = new_cache(1, prompt_length + max_new_tokens);
  const bool want_features = !layer_ids.empty();
  std::vector<torch::Tensor> features;  // [1, S, n * H] per forward pass

  torch::Tensor prompt = torch::tensor(prompt_ids, torch::kInt64).unsqueeze(0);  // [1, P]
  TargetOutput step = forward_cached(cache, prompt.to(device_), layer_ids, /*want_logits=*/true);
  while (true) {
    if (want_features) features.push_back(torch::cat(step.hidden_states, -1));
    const torch::Tensor& logits = step.logits;
    const int64_t token = pick_token(logits[0][logits.size(1) - 1], temperature, generator);
    result.tokens.push_back(token);
    const bool stop = std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
    const bool last = stop || static_cast<int64_t>(result.tokens.size()) >= max_new_tokens;
    if (last && !want_features) break;
    const torch::Tensor next = torch::full({1, 1}, token, torch::kInt64).to(device_);
    // The last token's step is for its states only: no logits, no more tokens.
    step = forward_cached(cache, next, layer_ids, /*want_logits=*/!last);
    if (last) {
      features.push_back(torch::cat(step.hidden_states, -1));
      break;
    }
  }
  if (want_features) result.features = torch::cat(features, 1).squeeze(0);  // [P + tokens, n * H]
  return result;
}

}  // namespace dflow::target
