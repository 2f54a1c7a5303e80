// `dflow prepare IN.jsonl --out DIR` (token ids, or conversations with
// --tokenizer and --chat-template) and `dflow make-tiny-target --out DIR`.
#include <iostream>

#include "config/errors.hpp"
#include "data/prepare.hpp"
#include "model/tiny_target.hpp"
#include "text/chat_prepare.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

namespace {

int prepare_conversations(const data::PrepareOptions& ids_options, const std::string& tokenizer,
                          const std::string& chat_template, const std::string& out_jsonl, bool last_turn_only) {
  if (tokenizer.empty() || chat_template.empty()) {
    throw ConfigError("conversations need both --tokenizer TARGET_DIR and --chat-template NAME");
  }
  if (ids_options.vocab_size != 0) throw ConfigError("--vocab-size is for token ids; conversations use the tokenizer's");
  text::ChatPrepareOptions options;
  options.input_path = ids_options.input_path;
  options.out_dir = ids_options.out_dir;
  options.tokenizer = tokenizer;
  options.chat_template = chat_template;
  options.max_length = ids_options.max_length;
  options.too_long = ids_options.too_long;
  options.last_turn_only = last_turn_only;
  options.samples_per_shard = ids_options.samples_per_shard;
  options.overwrite = ids_options.overwrite;
  options.out_jsonl = out_jsonl;
  std::cout << text::prepare_chats(options).summary() << "\n";
  return 0;
}

}  // namespace

void add_prepare_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("prepare", "convert JSONL samples {input_ids, loss_mask}, or conversations with "
                                             "--tokenizer and --chat-template, into binary shards");
  static data::PrepareOptions options;
  static std::string too_long = "truncate";
  static std::string tokenizer, chat_template, out_jsonl;
  static bool last_turn_only = false;
  sub->add_option("IN", options.input_path, "JSONL input, one sample (or conversation) per line")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--tokenizer", tokenizer,
                  "conversations: the target directory (its tokenizer.json) to tokenize {\"messages\"} / ShareGPT "
                  "{\"conversations\"} lines with");
  sub->add_option("--chat-template", chat_template, "conversations: qwen3 | qwen2.5 | chatml | llama3");
  sub->add_flag("--last-turn-only", last_turn_only, "conversations: learn only the last assistant turn");
  sub->add_option("--out-jsonl", out_jsonl,
                  "conversations: also write the tokenized samples {input_ids, loss_mask}, one line per accepted "
                  "conversation, in input order");
  sub->add_option("--out", options.out_dir, "output directory for the shards")->required();
  sub->add_option("--max-length", options.max_length, "longest sample in tokens")->capture_default_str();
  sub->add_option("--too-long", too_long, "truncate | skip: what to do with longer samples")->capture_default_str();
  sub->add_option("--vocab-size", options.vocab_size, "refuse ids >= this (0: unchecked)")->capture_default_str();
  sub->add_option("--samples-per-shard", options.samples_per_shard)->capture_default_str();
  sub->add_flag("--overwrite", options.overwrite, "replace an existing output directory");
  sub->callback([&action] {
    action = [] {
      options.too_long = data::parse_too_long_policy(too_long);
      if (!tokenizer.empty() || !chat_template.empty()) return prepare_conversations(options, tokenizer, chat_template, out_jsonl, last_turn_only);
      if (last_turn_only || !out_jsonl.empty()) {
        throw ConfigError("--last-turn-only and --out-jsonl are for conversations: add --tokenizer and --chat-template");
      }
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
