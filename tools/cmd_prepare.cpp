// `dflow prepare IN.jsonl --out DIR` and `dflow make-tiny-target --out DIR`.
#include <iostream>

#include "data/prepare.hpp"
#include "model/tiny_target.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_prepare_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("prepare", "convert JSONL samples {input_ids, loss_mask} into binary shards");
  static data::PrepareOptions options;
  static std::string too_long = "truncate";
  sub->add_option("IN", options.input_path, "JSONL input, one sample per line")->required()->check(CLI::ExistingFile);
  sub->add_option("--out", options.out_dir, "output directory for the shards")->required();
  sub->add_option("--max-length", options.max_length, "longest sample in tokens")->capture_default_str();
  sub->add_option("--too-long", too_long, "truncate | skip: what to do with longer samples")->capture_default_str();
  sub->add_option("--vocab-size", options.vocab_size, "refuse ids >= this (0: unchecked)")->capture_default_str();
  sub->add_option("--samples-per-shard", options.samples_per_shard)->capture_default_str();
  sub->add_flag("--overwrite", options.overwrite, "replace an existing output directory");
  sub->callback([&action] {
    action = [] {
      options.too_long = data::parse_too_long_policy(too_long);
      auto report = data::prepare_jsonl(options);
      std::cout << report.summary() << "\n";
      return 0;
    };
  });
}

void add_make_tiny_target_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("make-tiny-target",
                                 "write a Qwen3-architecture model in Hugging Face layout: tiny (tests, demo) or, "
                                 "with --preset, random weights in a real model's shapes");
  static model::TinyTargetOptions options;
  static std::string preset, dtype = "float32";
  static int64_t max_shard_mib = 0;
  sub->add_option("--out", options.out_dir, "output directory")->required();
  auto* preset_option =
      sub->add_option("--preset", preset,
                      "qwen3-0.6b | qwen3-8b: the real shapes and vocabulary (151936), random weights, bfloat16, "
                      "sharded with model.safetensors.index.json")
          ->check(CLI::IsMember(model::target_presets()));
  for (auto* shape_option : {sub->add_option("--layers", options.num_layers)->capture_default_str(),
                             sub->add_option("--hidden-size", options.hidden_size)->capture_default_str(),
                             sub->add_option("--heads", options.num_heads)->capture_default_str(),
                             sub->add_option("--kv-heads", options.num_kv_heads)->capture_default_str(),
                             sub->add_option("--intermediate-size", options.intermediate_size)->capture_default_str(),
                             sub->add_option("--vocab", options.vocab_size)->capture_default_str()})
    shape_option->excludes(preset_option);
  sub->add_option("--seed", options.seed)->capture_default_str();
  sub->add_option("--pattern", options.pattern,
                  "random: patternless continuations; echo: token[t] = perm(token[t - lag]), learnable by a drafter")
      ->check(CLI::IsMember({"random", "echo"}))
      ->capture_default_str()
      ->excludes(preset_option);
  sub->add_option("--echo-lag", options.echo_lag, "echo: how far back the echoed token lies")->capture_default_str();
  auto* dtype_option = sub->add_option("--dtype", dtype, "float32 | bfloat16 (a preset's default: bfloat16)")
                           ->check(CLI::IsMember({"float32", "bfloat16"}));
  auto* shard_option = sub->add_option("--max-shard-mib", max_shard_mib,
                                       "write shards of at most this size plus model.safetensors.index.json "
                                       "(a preset's default: 512; 0: one model.safetensors)");
  static std::string device = "cpu";
  sub->add_option("--device", device, "where random weights are drawn: cpu, or cuda (a Qwen3-8B-sized model in seconds)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->callback([&action, dtype_option, shard_option] {
    options.generate_on = device == "cuda" ? torch::Device("cuda:0") : torch::Device(torch::kCPU);
    if (!preset.empty()) options = model::preset_target_options(preset, options);
    if (preset.empty() || dtype_option->count() > 0) options.dtype = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    if (preset.empty() || shard_option->count() > 0) options.max_shard_bytes = max_shard_mib << 20;
    action = [] {
      auto config = model::make_tiny_target(options);
      std::cout << "wrote " << options.out_dir.string() << ": " << config.num_hidden_layers << " layers, hidden "
                << config.hidden_size << ", vocab " << config.vocab_size << ", "
                << (options.dtype == torch::kBFloat16 ? "bfloat16" : "float32")
                << (options.max_shard_bytes > 0 ? ", sharded with model.safetensors.index.json" : "") << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
