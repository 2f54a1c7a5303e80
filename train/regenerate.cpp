#include "train/regenerate.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <map>
#include <random>

#include "data/checksum.hpp"

namespace dflow::train {

namespace {

bool is_eos(const model::TargetModel& target, int64_t token) {
  const auto& eos = target.config().eos_token_ids;
  return std::find(eos.begin(), eos.end(), token) != eos.end();
}

// Greedy decoding of prompts of one length as one batch through the KV
// cache; rows that reached eos keep decoding but their tokens are dropped.
// Same tokens as one-by-one greedy generation, many times faster.
std::vector<std::vector<int64_t>> greedy_batch(const model::TargetModel& target,
                                               const std::vector<const std::vector<int64_t>*>& prompts,
                                               int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  const int64_t rows = static_cast<int64_t>(prompts.size());
  const int64_t prompt_length = static_cast<int64_t>(prompts.front()->size());
  auto ids = torch::empty({rows, prompt_length}, torch::kInt64);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(prompts[r]->begin(), prompts[r]->end(), ids[r].data_ptr<int64_t>());
  auto cache = target.new_cache(rows, prompt_length + max_new_tokens);
  auto logits = target.forward_cached(cache, ids.to(target.device()), {}, true).logits;  // [B, P, V]
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rows));
  std::vector<bool> done(static_cast<size_t>(rows), false);
  for (int64_t t = 0; t < max_new_tokens; ++t) {
    auto next = logits.select(1, logits.size(1) - 1).argmax(-1).to(torch::kCPU);  // [B]
    bool all_done = true;
    for (int64_t r = 0; r < rows; ++r) {
      if (done[r]) continue;
      int64_t token = next[r].item<int64_t>();
      out[r].push_back(token);
      done[r] = is_eos(target, token);
      all_done = all_done && done[r];
    }
    if (all_done || t + 1 == max_new_tokens) break;
    logits = target.forward_cached(cache, next.unsqueeze(1).to(target.device()), {}, true).logits;  // [B, 1, V]
  }
  return out;
}

}  // namespace

int64_t regenerate_jsonl(const model::TargetModel& target, const std::vector<std::vector<int64_t>>& prompts,
                         const RegenerateOptions& options, const std::filesystem::path& out_jsonl) {
  if (out_jsonl.has_parent_path()) std::filesystem::create_directories(out_jsonl.parent_path());
  const auto tmp = out_jsonl.string() + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  if (!out) throw std::runtime_error("regenerate: cannot write " + tmp);
  std::vector<std::vector<int64_t>> responses(prompts.size());
  if (options.temperature <= 0) {
    // Batch prompts of equal length (up to batch_rows at a time).
    std::map<size_t, std::vector<size_t>> by_length;
    for (size_t i = 0; i < prompts.size(); ++i) by_length[prompts[i].size()].push_back(i);
    for (const auto& [length, indices] : by_length) {
      for (size_t begin = 0; begin < indices.size(); begin += static_cast<size_t>(options.batch_rows)) {
        size_t end = std::min(indices.size(), begin + static_cast<size_t>(options.batch_rows));
        std::vector<const std::vector<int64_t>*> group;
        for (size_t j = begin; j < end; ++j) group.push_back(&prompts[indices[j]]);
        auto generated = greedy_batch(target, group, options.max_new_tokens);
        for (size_t j = begin; j < end; ++j) responses[indices[j]] = std::move(generated[j - begin]);
      }
    }
  } else {
    for (size_t i = 0; i < prompts.size(); ++i)
      responses[i] = target.generate(prompts[i], options.max_new_tokens, options.temperature,
                                     data::hash_combine(options.seed, i), target.config().eos_token_ids);
  }
  int64_t written = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& prompt = prompts[i];
    const auto& response = responses[i];
    if (response.empty()) continue;
    nlohmann::json sample;
    std::vector<int64_t> ids = prompt;
    ids.insert(ids.end(), response.begin(), response.end());
    std::vector<int> mask(prompt.size(), 0);
    mask.resize(ids.size(), 1);
    sample["input_ids"] = ids;
    sample["loss_mask"] = mask;
    out << sample.dump() << "\n";
    ++written;
  }
  out.close();
  if (!out) throw std::runtime_error("regenerate: cannot write " + tmp);
  std::filesystem::rename(tmp, out_jsonl);
  return written;
}

std::vector<std::vector<int64_t>> synthetic_prompts(int64_t count, int64_t min_len, int64_t max_len,
                                                    int64_t vocab_limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> length_step(0, (max_len - min_len) / 8), token(0, vocab_limit - 1);
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(count));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(min_len + 8 * length_step(rng)));
    for (auto& t : p) t = token(rng);
  }
  return prompts;
}

}  // namespace dflow::train
