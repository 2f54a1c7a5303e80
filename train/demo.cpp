#include "train/demo.hpp"

#include <filesystem>

#include "config/log.hpp"
#include "data/prepare.hpp"
#include "model/tiny_target.hpp"
#include "train/regenerate.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

void ensure_demo_assets(const config::Config& config, const DemoDataOptions& options) {
  const fs::path target_dir = config.model.target.path;
  if (!fs::exists(target_dir / "config.json")) {
    log::info("demo", log::str("creating a tiny Qwen3-architecture target in ", target_dir.string()));
    model::TinyTargetOptions tiny;
    tiny.out_dir = target_dir;
    tiny.seed = config.run.seed;
    model::make_tiny_target(tiny);
  }
  const fs::path data_dir = config.data.train.front();
  if (fs::exists(data_dir)) return;
  log::info("demo", log::str("regenerating ", options.num_prompts, " responses with the target into ", data_dir.string(),
                             " (once)"));
  auto target = model::TargetModel::load(target_dir);
  int64_t vocab_limit = target.config().vocab_size - 2;  // keep eos and mask out of prompts
  auto prompts = synthetic_prompts(options.num_prompts, options.min_prompt_tokens, options.max_prompt_tokens,
                                   vocab_limit, config.run.seed);
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
