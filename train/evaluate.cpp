#include "train/evaluate.hpp"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "model/speculative.hpp"

namespace dflow::train {

std::vector<std::vector<int64_t>> read_prompts(const std::filesystem::path& jsonl) {
  std::ifstream in(jsonl);
  if (!in) throw std::runtime_error("cannot read prompts file " + jsonl.string());
  std::vector<std::vector<int64_t>> prompts;
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line);
      std::vector<int64_t> prompt;
      if (j.contains("prompt_ids")) {
        prompt = j["prompt_ids"].get<std::vector<int64_t>>();
      } else {
        auto ids = j.at("input_ids").get<std::vector<int64_t>>();
        auto mask = j.at("loss_mask").get<std::vector<int>>();
        for (size_t i = 0; i < ids.size() && i < mask.size() && mask[i] == 0; ++i) prompt.push_back(ids[i]);
      }
      if (prompt.empty()) throw std::runtime_error("empty prompt");
      prompts.push_back(std::move(prompt));
    } catch (const std::exception& e) {
      throw std::runtime_error(jsonl.string() + ":" + std::to_string(line_number) + ": " + e.what() +
                               " (expected {\"prompt_ids\": [...]} or {\"input_ids\": [...], \"loss_mask\": [...]})");
    }
  }
  if (prompts.empty()) throw std::runtime_error(jsonl.string() + " holds no prompts");
  return prompts;
}

EvalReport evaluate_drafter(model::DFlashDrafterImpl& drafter, const model::TargetModel& target,
                            const std::vector<std::vector<int64_t>>& prompts, const EvalOptions& options) {
  using clock = std::chrono::steady_clock;
  torch::NoGradGuard no_grad;
  const int64_t block = drafter.spec().block_size;
  EvalReport r;
  r.tau_histogram.assign(static_cast<size_t>(block), 0);
  r.acceptance_by_position.assign(static_cast<size_t>(block - 1), 0.0);
  int64_t cycles = 0, spec_tokens = 0, target_tokens = 0, prompts_with_cycles = 0;
  double spec_s = 0, target_s = 0, tau_sum = 0;
  const auto& eos = target.config().eos_token_ids;
  for (const auto& prompt : prompts) {
    if (options.max_prompts > 0 && r.prompts >= options.max_prompts) break;
    auto t0 = clock::now();
    auto reference = target.generate(prompt, options.max_new_tokens, 0.0, 0, eos);
    auto t1 = clock::now();
    auto spec = model::speculative_generate(drafter, target, prompt, options.max_new_tokens, eos);
    auto t2 = clock::now();
    target_s += std::chrono::duration<double>(t1 - t0).count();
    spec_s += std::chrono::duration<double>(t2 - t1).count();
    target_tokens += static_cast<int64_t>(reference.size());
    spec_tokens += static_cast<int64_t>(spec.tokens.size());
    if (spec.tokens != reference) ++r.mismatched_prompts;
    // A prompt whose answer ended at the bonus token had no drafting cycle.
    if (!spec.acceptance_lengths.empty()) tau_sum += spec.mean_acceptance_length(), ++prompts_with_cycles;
    for (int64_t tau : spec.acceptance_lengths) {
      r.tau_histogram.at(static_cast<size_t>(tau - 1))++;
      for (int64_t k = 1; k < tau; ++k) r.acceptance_by_position[static_cast<size_t>(k - 1)] += 1;
      ++cycles;
    }
    ++r.prompts;
  }
  r.mean_tau = prompts_with_cycles ? tau_sum / static_cast<double>(prompts_with_cycles) : 0;
  for (auto& a : r.acceptance_by_position) a = cycles ? a / static_cast<double>(cycles) : 0;
  r.speculative_tokens_per_s = spec_s > 0 ? spec_tokens / spec_s : 0;
  r.target_tokens_per_s = target_s > 0 ? target_tokens / target_s : 0;
  return r;
}

nlohmann::json EvalReport::to_json() const {
  return {{"prompts", prompts},
          {"mean_tau", mean_tau},
          {"tau_histogram", tau_histogram},
          {"acceptance_by_position", acceptance_by_position},
          {"mismatched_prompts", mismatched_prompts},
          {"speculative_tokens_per_s", speculative_tokens_per_s},
          {"target_tokens_per_s", target_tokens_per_s},
          {"speedup", target_tokens_per_s > 0 ? speculative_tokens_per_s / target_tokens_per_s : 0.0}};
}

std::string EvalReport::summary() const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << "prompts " << prompts << "\nmean acceptance length tau " << mean_tau
      << " (mean over prompts of each prompt's mean; 1 = nothing accepted)\ntau histogram (1.." << tau_histogram.size()
      << "):";
  for (auto c : tau_histogram) out << " " << c;
  out << "\nacceptance by draft position (k=1..):";
  for (auto a : acceptance_by_position) out << " " << std::setprecision(2) << a;
  out << std::setprecision(1) << "\nspeculative " << speculative_tokens_per_s << " tok/s, target-only "
      << target_tokens_per_s << " tok/s, speed-up " << std::setprecision(2)
      << (target_tokens_per_s > 0 ? speculative_tokens_per_s / target_tokens_per_s : 0.0)
      << "\nlossless: " << (mismatched_prompts == 0 ? "yes, every output equals target-only greedy decoding"
                                                    : std::to_string(mismatched_prompts) + " prompts DIFFER");
  return out.str();
}

}  // namespace dflow::train
