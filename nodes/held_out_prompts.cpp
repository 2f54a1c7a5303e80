// The eval node's settings and held-out prompts: its prompts file without the training prompts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "nodes/eval_tau.hpp"
#include "nodes/node_params.hpp"
#include "nodes/run_context.hpp"
#include "train/evaluate.hpp"

namespace dflow::nodes {

namespace {

// Is the prompt of `sample` (its tokens before the first trained one) exactly
// its first `length` tokens? Reads the loss mask only up to there.
bool prompt_is_first(const data::SampleView& sample, size_t length, PromptScanStats& read) {
  for (size_t i = 0; i < length; ++i) {
    ++read.mask_bytes_read;
    if (sample.loss_mask[i] != 0) return false;
  }
  if (length == sample.loss_mask.size()) return true;
  ++read.mask_bytes_read;
  return sample.loss_mask[length] != 0;
}

}  // namespace

std::vector<bool> training_prompts(const data::Dataset& dataset, const std::vector<std::vector<int64_t>>& prompts,
                                   PromptScanStats* stats) {
  // The prompts in lexicographic order: those that agree with a sample's
  // first k ids form one range, led by those of length k. Each sample is read
  // id by id only while some prompt still agrees with it (ids compared as
  // int64: a prompt id beyond int32 equals no stored id).
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompts[a] < prompts[b]; });
  size_t shortest = SIZE_MAX;
  for (const auto& p : prompts) shortest = std::min(shortest, p.size());
  std::vector<bool> training(prompts.size(), false);
  size_t unmatched = prompts.size();
  PromptScanStats read;
  for (int64_t i = 0; i < dataset.size() && unmatched > 0; ++i) {
    if (static_cast<size_t>(dataset.lengths()[i]) < shortest) continue;  // lengths are in memory
    const data::SampleView sample = dataset.sample(i);
    auto lo = order.begin(), hi = order.end();
    for (size_t k = 0;; ++k) {
      for (; lo != hi && prompts[*lo].size() == k; ++lo)
        if (!training[*lo] && prompt_is_first(sample, k, read)) training[*lo] = true, --unmatched;
      if (lo == hi || k == sample.input_ids.size()) break;
      const int64_t id = sample.input_ids[k];
      ++read.ids_read;
      lo = std::partition_point(lo, hi, [&](size_t p) { return prompts[p][k] < id; });
      hi = std::partition_point(lo, hi, [&](size_t p) { return prompts[p][k] == id; });
    }
  }
  if (stats) *stats = read;
  return training;
}

namespace {

// Evaluation never changes what training computes: every key may change on resume.
const config::KeySet<EvalSettings>& eval_keys() {
  using config::OnResume;
  static const config::KeySet<EvalSettings> keys = [] {
    config::KeySet<EvalSettings> k;
    k.add("prompts", [](EvalSettings& s) -> auto& { return s.prompts; }, OnResume::may_change,
          "JSONL of held-out prompts (default: eval.prompts)");
    k.add("max_prompts", [](EvalSettings& s) -> auto& { return s.max_prompts; }, OnResume::may_change,
          "prompts evaluated, 0: all (default: eval.max_prompts)",
          config::must<int>([](int v) { return v >= 0; }, "must be >= 0 (0: all)"));
    k.add("max_new_tokens", [](EvalSettings& s) -> auto& { return s.max_new_tokens; }, OnResume::may_change,
          "tokens generated per prompt (default: eval.max_new_tokens)",
          config::must<int>([](int v) { return v >= 1; }, "must be >= 1"));
    k.add("temperature", [](EvalSettings& s) -> auto& { return s.temperature; }, OnResume::may_change,
          "0: greedy; > 0: speculative sampling (default: eval.temperature)",
          config::must<double>([](double v) { return v >= 0; }, "must be >= 0 (0: greedy)"));
    k.add("seed", [](EvalSettings& s) -> auto& { return s.seed; }, OnResume::may_change,
          "sampling seed (default: eval.seed)");
    return k;
  }();
  return keys;
}

EvalSettings settings_of(const config::EvalConfig& eval) {
  return EvalSettings{eval.prompts, eval.max_prompts, eval.max_new_tokens, eval.temperature, eval.seed};
}

}  // namespace

EvalSettings read_eval_settings(const config::EvalConfig& defaults, config::YamlSection& params) {
  return read_params(eval_keys(), params, settings_of(defaults));
}

std::vector<config::KeyDoc> eval_params() { return eval_keys().docs(settings_of(config::EvalConfig{})); }

std::vector<std::vector<int64_t>> held_out_prompts(const RunContext& run, const std::string& node,
                                                   const EvalSettings& eval) {
  const std::string where = "node '" + node + "' (eval.tau): prompts (params, or eval.prompts): ";
  if (!fs::is_regular_file(eval.prompts))
    throw ConfigError(where + "cannot read the held-out prompts file '" + eval.prompts +
                      "' (a JSONL file of {\"prompt_ids\": [...]} or samples that are not in the training data)");
  std::vector<std::vector<int64_t>> candidates;
  std::vector<int64_t> lines;
  try {
    candidates = train::read_prompts(eval.prompts, &lines);
  } catch (const std::exception& e) {
    throw ConfigError(where + e.what());
  }
  const int64_t vocab = run.target_config.vocab_size;
  for (size_t i = 0; i < candidates.size(); ++i)
    for (const int64_t id : candidates[i])
      if (id < 0 || id >= vocab)
        throw ConfigError(where + eval.prompts + ":" + std::to_string(lines[i]) + ": prompt id " + std::to_string(id) +
                          " is outside the vocabulary of the target " + run.config.model.target.path + " (ids 0.." +
                          std::to_string(vocab - 1) + "); were these prompts tokenized for another model?");
  // Only as many candidates as evaluation takes are compared with the
  // training prompts: twice eval.max_prompts first, the rest only if too
  // many of those were training prompts.
  const size_t want = eval.max_prompts > 0 ? static_cast<size_t>(eval.max_prompts) : candidates.size();
  std::vector<std::vector<int64_t>> prompts;
  int64_t dropped = 0;
  for (size_t begin = 0; begin < candidates.size() && prompts.size() < want;) {
    const size_t end = begin == 0 ? std::min(candidates.size(), 2 * want) : candidates.size();
    const std::vector<std::vector<int64_t>> batch(candidates.begin() + static_cast<std::ptrdiff_t>(begin),
                                                  candidates.begin() + static_cast<std::ptrdiff_t>(end));
    const std::vector<bool> training = training_prompts(run.dataset, batch);
    for (size_t i = 0; i < batch.size() && prompts.size() < want; ++i) {
      if (training[i]) ++dropped;
      else prompts.push_back(batch[i]);
    }
    begin = end;
  }
  if (dropped > 0)
    log::warn("eval", log::str(dropped, " prompts of ", eval.prompts, " are training prompts: left out of evaluation"));
  if (prompts.empty())
    throw ConfigError(where + "'" + eval.prompts + "' holds no prompt that is not a training prompt");
  return prompts;
}

}  // namespace dflow::nodes
