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
                                 "write a tiny Qwen3-architecture model in Hugging Face layout (tests, demo)");
  static model::TinyTargetOptions options;
  sub->add_option("--out", options.out_dir, "output directory")->required();
  sub->add_option("--layers", options.num_layers)->capture_default_str();
  sub->add_option("--hidden-size", options.hidden_size)->capture_default_str();
  sub->add_option("--heads", options.num_heads)->capture_default_str();
  sub->add_option("--kv-heads", options.num_kv_heads)->capture_default_str();
  sub->add_option("--intermediate-size", options.intermediate_size)->capture_default_str();
  sub->add_option("--vocab", options.vocab_size)->capture_default_str();
  sub->add_option("--seed", options.seed)->capture_default_str();
  sub->add_option("--pattern", options.pattern,
                  "random: patternless continuations; echo: token[t] = perm(token[t - lag]), learnable by a drafter")
      ->check(CLI::IsMember({"random", "echo"}))
      ->capture_default_str();
  sub->add_option("--echo-lag", options.echo_lag, "echo: how far back the echoed token lies")->capture_default_str();
  sub->callback([&action] {
    action = [] {
      auto config = model::make_tiny_target(options);
      std::cout << "wrote " << options.out_dir.string() << ": " << config.num_hidden_layers << " layers, hidden "
                << config.hidden_size << ", vocab " << config.vocab_size << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
