#include "train/evaluate.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "data/checksum.hpp"
#include "drafter/kind.hpp"
#include "drafter/speculative.hpp"

namespace dflow::train {

namespace {
const char* kPromptFormat = "expected JSONL, one object a line: {\"prompt_ids\": [...]} or {\"input_ids\": [...], \"loss_mask\": [...]}";

// Why a prompts file cannot be opened, in words a user can act on.
std::ifstream open_prompts(const std::filesystem::path& jsonl) {
  const std::string what = "cannot read prompts file " + jsonl.string() + ": ";
  std::error_code ec;
  const auto status = std::filesystem::status(jsonl, ec);
  if (status.type() == std::filesystem::file_type::not_found) throw std::runtime_error(what + "no such file");
  if (status.type() == std::filesystem::file_type::directory)
    throw std::runtime_error(what + "it is a directory, not a JSONL file");
  std::ifstream in(jsonl);
  if (!in) throw std::runtime_error(what + std::strerror(errno));
  return in;
}
}  // namespace

std::vector<std::vector<int64_t>> read_prompts(const std::filesystem::path& jsonl, std::vector<int64_t>* lines) {
  std::ifstream in = open_prompts(jsonl);
  std::vector<std::vector<int64_t>> prompts;
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = jsonl.string() + ":" + std::to_string(line_number) + ": ";
    if (!nlohmann::json::accept(line))
      throw std::runtime_error(where + "not a JSON line (" + kPromptFormat + ")");
    try {
      auto j = nlohmann::json::parse(line);
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
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
      if (lines) lines->push_back(line_number);
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
      throw std::runtime_error(where + why + " (" + kPromptFormat + ")");
    }
  }
  if (prompts.empty()) throw std::runtime_error("prompts file " + jsonl.string() + " holds no prompts");
  return prompts;
}

EvalReport evaluate_drafter(drafter::DFlashDrafterImpl& drafter, const target::TargetModel& target,
                            const std::vector<std::vector<int64_t>>& prompts, const EvalOptions& options) {
  using clock = std::chrono::steady_clock;
  if (options.temperature < 0)
    throw std::invalid_argument("evaluate: temperature must be >= 0 (0: greedy), got " +
                                std::to_string(options.temperature));
  torch::NoGradGuard no_grad;
  const int64_t block = drafter.spec().block_size;
  EvalReport r;
  r.temperature = options.temperature;
  r.lossless_checked = options.compare_with_target && options.temperature <= 0;
  r.tau_histogram.assign(static_cast<size_t>(block), 0);
  r.acceptance_by_position.assign(static_cast<size_t>(block - 1), 0.0);
  // The calibration counts of the acceptance the drafter's kind predicts
  // (if it does), summed over prompts, per slot 0 .. B-1.
  const bool predicts = drafter.kind_modules().predicts_acceptance();
  std::vector<double> verified, predicted, accepted;
  if (predicts)
    for (auto* v : {&verified, &predicted, &accepted}) v->assign(static_cast<size_t>(block), 0.0);
  int64_t target_tokens = 0, prompts_with_cycles = 0;
  double target_s = 0, tau_sum = 0;
  drafter::SpeculativeOptions spec_options;
  spec_options.max_new_tokens = options.max_new_tokens;
  spec_options.eos_token_ids = target.config().eos_token_ids;
  spec_options.temperature = options.temperature;
  for (const auto& prompt : prompts) {
    if (options.max_prompts > 0 && r.prompts >= options.max_prompts) break;
    spec_options.seed = data::hash_combine(options.seed, static_cast<uint64_t>(r.prompts));
    std::vector<int64_t> reference;
    if (options.compare_with_target) {
      auto t0 = clock::now();
      reference = target.generate(prompt, options.max_new_tokens, options.temperature, spec_options.seed,
                                  spec_options.eos_token_ids);
      target_s += std::chrono::duration<double>(clock::now() - t0).count();
      target_tokens += static_cast<int64_t>(reference.size());
    }
    auto t1 = clock::now();
    auto spec = drafter::speculative_generate(drafter, target, prompt, spec_options);
    r.speculative_s += std::chrono::duration<double>(clock::now() - t1).count();
    r.generated_tokens += static_cast<int64_t>(spec.tokens.size());
    if (static_cast<int64_t>(r.outputs.size()) < options.keep_outputs) {
      r.outputs.push_back({prompt, spec.tokens, spec.acceptance_lengths});
    }
    if (!spec.verified_per_position.empty()) {
      for (size_t k = 0; k < verified.size() && k < spec.verified_per_position.size(); ++k) {
        verified[k] += spec.verified_per_position[k];
        predicted[k] += spec.predicted_accept_per_position[k];
        accepted[k] += spec.accepted_per_position[k];
      }
    }
    if (r.lossless_checked && spec.tokens != reference) ++r.mismatched_prompts;
    // A prompt whose answer ended at the bonus token had no drafting cycle.
    if (!spec.acceptance_lengths.empty()) tau_sum += spec.mean_acceptance_length(), ++prompts_with_cycles;
    for (int64_t tau : spec.acceptance_lengths) {
      r.tau_histogram.at(static_cast<size_t>(tau - 1))++;
      for (int64_t k = 1; k < tau; ++k) r.acceptance_by_position[static_cast<size_t>(k - 1)] += 1;
      ++r.cycles;
    }
    ++r.prompts;
  }
  if (predicts) {
    for (int64_t k = 1; k < block; ++k) {
      const auto i = static_cast<size_t>(k);
      ConfidenceCalibration c;
      c.position = k;
      c.verified = static_cast<int64_t>(verified[i]);
      c.predicted = verified[i] > 0 ? predicted[i] / verified[i] : 0.0;
      c.observed = verified[i] > 0 ? accepted[i] / verified[i] : 0.0;
      r.confidence_calibration.push_back(c);
    }
  }
  r.mean_tau = prompts_with_cycles ? tau_sum / static_cast<double>(prompts_with_cycles) : 0;
  for (auto& a : r.acceptance_by_position) a = r.cycles ? a / static_cast<double>(r.cycles) : 0;
  r.speculative_tokens_per_s = r.speculative_s > 0 ? r.generated_tokens / r.speculative_s : 0;
  r.target_tokens_per_s = target_s > 0 ? target_tokens / target_s : 0;
  return r;
}

nlohmann::json EvalReport::calibration_json() const {
  if (confidence_calibration.empty()) return nullptr;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : confidence_calibration)
    rows.push_back({{"position", c.position}, {"verified", c.verified}, {"predicted", c.predicted}, {"observed", c.observed}});
  return rows;
}

nlohmann::json EvalReport::to_json() const {
  nlohmann::json j = {{"prompts", prompts},
          {"mean_tau", mean_tau},
          {"tau_histogram", tau_histogram},
          {"acceptance_by_position", acceptance_by_position},
          {"mismatched_prompts", mismatched_prompts},
          {"lossless_checked", lossless_checked},
          {"temperature", temperature},
          {"cycles", cycles},
          {"speculative_tokens_per_s", speculative_tokens_per_s},
          {"target_tokens_per_s", target_tokens_per_s},
          {"speedup", target_tokens_per_s > 0 ? speculative_tokens_per_s / target_tokens_per_s : 0.0}};
  if (!confidence_calibration.empty()) j["confidence_calibration"] = calibration_json();
  return j;
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
      << "\nlossless: ";
  if (!lossless_checked && temperature > 0)
    out << "sampled at temperature " << temperature
        << " (speculative sampling keeps the target's distribution; outputs are not compared)";
  else if (!lossless_checked)
    out << "not checked";
  else
    out << (mismatched_prompts == 0 ? "yes, every output equals target-only greedy decoding"
                                    : std::to_string(mismatched_prompts) + " prompts DIFFER");
  if (!confidence_calibration.empty()) {
    out << "\nconfidence head calibration (position: predicted / observed acceptance, verified cycles):";
    for (const auto& c : confidence_calibration)
      out << "\n  k=" << c.position << ": " << std::setprecision(3) << c.predicted << " / " << c.observed << " ("
          << c.verified << ")";
  }
  return out.str();
}

}  // namespace dflow::train
