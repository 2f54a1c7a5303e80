#include "train/regenerate.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>

#include "config/errors.hpp"
#include "data/checksum.hpp"

namespace dflow::train {

namespace {

bool is_eos(const target::TargetModel& target, int64_t token) {
  const auto& eos = target.config().eos_token_ids;
  return std::find(eos.begin(), eos.end(), token) != eos.end();
}

// Greedy decoding of prompts of one length as one batch through the KV
// cache; rows that reached eos keep decoding but their tokens are dropped.
// Same tokens as one-by-one greedy generation, many times faster. With
// layer ids, `features` gets [B, P + max_new_tokens, n * H] (CPU, the
// target's dtype): the states each forward pass computed, plus one more step
// that feeds the last tokens; row r's positions past P + out[r].size() are
// the dropped tokens'.
std::vector<std::vector<int64_t>> greedy_batch(const target::TargetModel& target,
                                               const std::vector<const std::vector<int64_t>*>& prompts,
                                               int64_t max_new_tokens, const std::vector<int64_t>& layer_ids,
                                               torch::Tensor& features) {
  torch::NoGradGuard no_grad;
  const int64_t rows = static_cast<int64_t>(prompts.size());
  const int64_t prompt_length = static_cast<int64_t>(prompts.front()->size());
  auto ids = torch::empty({rows, prompt_length}, torch::kInt64);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(prompts[r]->begin(), prompts[r]->end(), ids[r].data_ptr<int64_t>());
  auto cache = target.new_cache(rows, prompt_length + max_new_tokens);
  const bool want_features = !layer_ids.empty();
  int64_t filled = 0;  // positions of `features` written
  // Each step's states go to the CPU at once (the step syncs for its tokens
  // anyway), leaving the device's memory to the KV cache.
  auto keep = [&](const target::TargetOutput& step) {
    auto states = torch::cat(step.hidden_states, -1);  // [B, S, n * H]
    if (!features.defined())
      features = torch::empty({rows, prompt_length + max_new_tokens, states.size(2)}, states.options().device(torch::kCPU));
    features.narrow(1, filled, states.size(1)).copy_(states);
    filled += states.size(1);
  };
  auto step = target.forward_cached(cache, ids.to(target.device()), layer_ids, true);  // logits [B, P, V]
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rows));
  std::vector<bool> done(static_cast<size_t>(rows), false);
  for (int64_t t = 0; t < max_new_tokens; ++t) {
    if (want_features) keep(step);
    const auto& logits = step.logits;
    auto next = logits.select(1, logits.size(1) - 1).argmax(-1).to(torch::kCPU);  // [B]
    bool all_done = true;
    for (int64_t r = 0; r < rows; ++r) {
      if (done[r]) continue;
      int64_t token = next[r].item<int64_t>();
      out[r].push_back(token);
      done[r] = is_eos(target, token);
      all_done = all_done && done[r];
    }
    const bool last = all_done || t + 1 == max_new_tokens;
    if (last && !want_features) break;
    // The last step feeds the last tokens for their states only.
    step = target.forward_cached(cache, next.unsqueeze(1).to(target.device()), layer_ids, !last);  // [B, 1, V]
    if (last) {
      keep(step);
      break;
    }
  }
  return out;
}

// Sample ids are line indices: they equal prompt indices because a line is
// skipped only for an empty response, which needs max_new_tokens 0.
void check_feature_options(const RegenerateOptions& options) {
  if (options.max_new_tokens < 1)
    throw ConfigError("regenerate --features: --max-new-tokens must be at least 1");
}

uint64_t projected_positions(const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens) {
  uint64_t positions = 0;
  for (const auto& p : prompts) positions += p.size() + static_cast<uint64_t>(max_new_tokens);
  return positions;
}

}  // namespace

int64_t regenerate_jsonl(const target::TargetModel& target, const std::vector<std::vector<int64_t>>& prompts,
                         const RegenerateOptions& options, const std::filesystem::path& out_jsonl) {
  if (out_jsonl.has_parent_path()) std::filesystem::create_directories(out_jsonl.parent_path());
  const auto tmp = out_jsonl.string() + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  if (!out) throw std::runtime_error("regenerate: cannot write " + tmp);
  std::unique_ptr<FeatureCapture> capture;
  if (options.features.enabled()) {
    check_feature_options(options);
    capture = std::make_unique<FeatureCapture>(target, options.features);
    capture->reserve(projected_positions(prompts, options.max_new_tokens));
  }
  const std::vector<int64_t> no_layers;
  const auto& layer_ids = capture ? capture->layer_ids() : no_layers;
  // Records go to the cache as soon as a sample is generated (holding every
  // sample's features until the JSONL is written would not fit in memory).
  auto record = [&](size_t index, const std::vector<int64_t>& response, const torch::Tensor& features) {
    if (!capture || response.empty()) return;  // no line, no record
    std::vector<int64_t> ids = prompts[index];
    ids.insert(ids.end(), response.begin(), response.end());
    if (capture->needs(static_cast<int64_t>(index), ids))
      capture->append(static_cast<int64_t>(index), ids, features.narrow(0, 0, static_cast<int64_t>(ids.size())));
  };
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
        torch::Tensor features;
        auto generated = greedy_batch(target, group, options.max_new_tokens, layer_ids, features);
        for (size_t j = begin; j < end; ++j) {
          responses[indices[j]] = std::move(generated[j - begin]);
          if (capture) record(indices[j], responses[indices[j]], features[static_cast<int64_t>(j - begin)]);
        }
      }
    }
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto generation = target.generate_with_features(prompts[i], options.max_new_tokens, options.temperature,
                                                      data::hash_combine(options.seed, i),
                                                      target.config().eos_token_ids, layer_ids);
      responses[i] = std::move(generation.tokens);
      record(i, responses[i], generation.features);
    }
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
  if (capture) capture->publish();  // before the JSONL appears: its lines' records are there when it is
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
