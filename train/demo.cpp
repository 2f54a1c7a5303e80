#include "train/demo.hpp"
#include "train/demo_target.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "config/log.hpp"
#include "data/prepare.hpp"
#include "target/tiny_target.hpp"
#include "train/regenerate.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

namespace {

// Held-out prompts from another seed, none equal to a training prompt.
void write_heldout_prompts(const fs::path& path, const std::vector<std::vector<int64_t>>& training_prompts,
                           const DemoDataOptions& options, int64_t vocab_limit, uint64_t seed) {
  const std::set<std::vector<int64_t>> training(training_prompts.begin(), training_prompts.end());
  auto candidates = synthetic_prompts(options.heldout_prompts * 2, options.min_prompt_tokens, options.max_prompt_tokens,
                                      vocab_limit, seed ^ 0x5eedf00dULL);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  int64_t written = 0;
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& prompt : candidates) {
      if (written == options.heldout_prompts) break;
      if (training.count(prompt)) continue;
      out << nlohmann::json{{"prompt_ids", prompt}}.dump() << "\n";
      ++written;
    }
    if (!out) throw std::runtime_error("demo: cannot write " + tmp.string());
  }
  fs::rename(tmp, path);
  log::info("demo", log::str(written, " held-out prompts (not among the training prompts) in ", path.string()));
}

}  // namespace

void make_demo_target(const fs::path& dir, uint64_t seed, const std::string& arch) {
  log::info("demo", log::str("creating a tiny ", arch, " target (echo pattern) in ", dir.string()));
  target::TinyTargetOptions tiny;
  tiny.out_dir = dir;
  tiny.seed = seed;
  tiny.arch = arch;
  tiny.pattern = "echo";
  target::make_tiny_target(tiny);
}

void ensure_demo_assets(const config::Config& config, const DemoDataOptions& options) {
  const fs::path target_dir = config.model.target.path;
  if (!fs::exists(target_dir / "config.json")) make_demo_target(target_dir, config.run.seed);
  const fs::path data_dir = config.data.train.front();
  const fs::path heldout = config.eval.prompts;
  const bool need_data = !fs::exists(data_dir), need_heldout = !heldout.empty() && !fs::exists(heldout);
  if (!need_data && !need_heldout) return;
  auto target = target::TargetModel::load(target_dir);
  int64_t vocab_limit = target.config().vocab_size - 2;  // keep eos and mask out of prompts
  auto prompts = synthetic_prompts(options.num_prompts, options.min_prompt_tokens, options.max_prompt_tokens,
                                   vocab_limit, config.run.seed);
  if (need_heldout) write_heldout_prompts(heldout, prompts, options, vocab_limit, config.run.seed);
  if (!need_data) return;
  log::info("demo", log::str("regenerating ", options.num_prompts, " responses with the target into ", data_dir.string(),
                             " (once)"));
  RegenerateOptions regen;
  regen.max_new_tokens = std::min<int64_t>(options.max_new_tokens, config.data.max_length - options.max_prompt_tokens);
  regen.seed = config.run.seed;
  const fs::path jsonl = data_dir.string() + ".jsonl";
  int64_t written = regenerate_jsonl(target, prompts, regen, jsonl);
  data::PrepareOptions prep;
  prep.input_path = jsonl;
  prep.out_dir = data_dir;
  prep.max_length = config.data.max_length;
  prep.vocab_size = target.config().vocab_size;
  auto report = data::prepare_jsonl(prep);
  log::info("demo", log::str(written, " samples regenerated; ", report.summary(3)));
}

}  // namespace dflow::train
