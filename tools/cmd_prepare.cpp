// `dflow prepare IN.jsonl --out DIR` (token ids, or conversations with
// --tokenizer and --chat-template) and `dflow make-tiny-target --out DIR`.
#include <torch/torch.h>

#include <algorithm>
#include <iostream>

#include "config/errors.hpp"
#include "data/prepare.hpp"
#include "target/tiny_target.hpp"
#include "text/chat_encode.hpp"
#include "text/chat_prepare.hpp"
#include "tools/cli.hpp"
#include "tools/thread_option.hpp"

namespace dflow::cli {

namespace {

int prepare_conversations(const data::PrepareOptions& ids_options, const std::string& tokenizer,
                          const std::string& chat_template, const std::string& out_jsonl, bool last_turn_only,
                          const std::string& current_date) {
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
  options.current_date = text::checked_current_date(current_date, "--current-date");
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
  sub->add_option("--chat-template", chat_template, "conversations: qwen3 | qwen3.5 | qwen2.5 | chatml | llama3 | harmony (gpt-oss)");
  static std::string current_date;
  sub->add_option("--current-date", current_date,
                  "conversations with harmony: the system message's \"Current date\" (YYYY-MM-DD; default today's, "
                  "as gpt-oss's template writes it), so a dataset prepared again is the same tokens");
  sub->add_flag("--last-turn-only", last_turn_only, "conversations: learn only the last assistant turn");
  sub->add_option("--out-jsonl", out_jsonl,
                  "conversations: also write the tokenized samples {input_ids, loss_mask}, one line per accepted "
                  "conversation, in input order");
  sub->add_option("--out", options.out_dir, "output directory for the shards")->required();
  sub->add_option("--max-length", options.max_length, "longest sample in tokens")->capture_default_str();
  sub->add_option("--too-long", too_long, "truncate | skip: what to do with longer samples")
      ->check(CLI::IsMember({"truncate", "skip"}))
      ->capture_default_str();
  sub->add_option("--vocab-size", options.vocab_size, "refuse ids >= this (0: unchecked)")->capture_default_str();
  sub->add_option("--samples-per-shard", options.samples_per_shard)->capture_default_str();
  sub->add_flag("--overwrite", options.overwrite, "replace an existing output directory");
  sub->callback([&action] {
    action = [] {
      options.too_long = data::parse_too_long_policy(too_long);
      if (!tokenizer.empty() || !chat_template.empty()) return prepare_conversations(options, tokenizer, chat_template, out_jsonl, last_turn_only,
                                                                            current_date);
      if (last_turn_only || !out_jsonl.empty() || !current_date.empty()) {
        throw ConfigError("--last-turn-only, --out-jsonl and --current-date are for conversations: add --tokenizer and "
                          "--chat-template");
      }
      auto report = data::prepare_jsonl(options);
      std::cout << report.summary() << "\n";
      return 0;
    };
  });
}

void add_make_tiny_target_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("make-tiny-target",
                                 "write a target model in Hugging Face layout (Qwen3, Qwen3-MoE, gpt-oss, or the "
                                 "text model of a Qwen3.5/3.6 wrapper, dense or MoE): tiny (tests, demo) or, with "
                                 "--preset, random weights in a real model's shapes");
  static target::TinyTargetOptions options;
  static std::string preset, dtype = "float32";
  static int64_t max_shard_mib = 0;
  sub->add_option("--out", options.out_dir, "output directory")->required();
  auto* preset_option =
      sub->add_option("--preset", preset,
                      "qwen3-0.6b | qwen3-8b | qwen3-30b-a3b | gpt-oss-20b | qwen3.5-35b-a3b: the real shapes and "
                      "vocabulary (qwen3.5-35b-a3b: its text model), random weights, bfloat16, sharded with "
                      "model.safetensors.index.json")
          ->check(CLI::IsMember(target::target_presets()));
  for (auto* shape_option :
       {sub->add_option("--arch", options.arch,
                        "qwen3 (Qwen3ForCausalLM) | qwen3_moe (Qwen3MoeForCausalLM) | gpt_oss (GptOssForCausalLM) | "
                        "qwen3_5 (Qwen3_5ForConditionalGeneration) | qwen3_5_moe (Qwen3_5MoeForConditionalGeneration): "
                        "the Qwen3.5 wrappers' text model, no vision tower, random pattern only")
            ->check(CLI::IsMember(target::tiny_target_architectures()))
            ->capture_default_str(),
        sub->add_option("--layers", options.num_layers)->capture_default_str(),
        sub->add_option("--hidden-size", options.hidden_size)->capture_default_str(),
        sub->add_option("--heads", options.num_heads)->capture_default_str(),
        sub->add_option("--kv-heads", options.num_kv_heads)->capture_default_str(),
        sub->add_option("--head-dim", options.head_dim, "each attention head's width (0: hidden size / heads)")
            ->capture_default_str(),
        sub->add_option("--intermediate-size", options.intermediate_size,
                        "the dense MLP's width (qwen3, qwen3_5; gpt_oss: its experts')")
            ->capture_default_str(),
        sub->add_option("--vocab", options.vocab_size)->capture_default_str(),
        sub->add_option("--experts", options.num_experts, "qwen3_moe, gpt_oss, qwen3_5_moe: routed experts per layer")
            ->capture_default_str(),
        sub->add_option("--experts-per-token", options.experts_per_token, "qwen3_moe, gpt_oss, qwen3_5_moe: top-k")
            ->capture_default_str(),
        sub->add_option("--moe-intermediate-size", options.moe_intermediate_size,
                        "qwen3_moe, qwen3_5_moe: each expert's width")
            ->capture_default_str(),
        sub->add_option("--shared-expert-intermediate-size", options.shared_expert_intermediate_size,
                        "qwen3_5_moe: the width of the shared expert every token runs beside its routed ones")
            ->capture_default_str(),
        sub->add_option("--layer-types", options.layer_types,
                        "qwen3_5, qwen3_5_moe: each layer's kind, linear_attention (Gated DeltaNet) or full_attention, "
                        "comma-separated, one per layer (default: from --full-attention-interval)")
            ->delimiter(','),
        sub->add_option("--full-attention-interval", options.full_attention_interval,
                        "qwen3_5, qwen3_5_moe: every n-th layer full_attention, the others linear_attention")
            ->capture_default_str(),
        sub->add_option("--linear-key-heads", options.linear_num_key_heads,
                        "qwen3_5, qwen3_5_moe: Gated DeltaNet's q/k heads (linear_num_key_heads)")
            ->capture_default_str(),
        sub->add_option("--linear-value-heads", options.linear_num_value_heads,
                        "qwen3_5, qwen3_5_moe: Gated DeltaNet's v heads, a multiple of its key heads "
                        "(linear_num_value_heads)")
            ->capture_default_str(),
        sub->add_option("--linear-key-head-dim", options.linear_key_head_dim, "qwen3_5, qwen3_5_moe: each q/k head's width")
            ->capture_default_str(),
        sub->add_option("--linear-value-head-dim", options.linear_value_head_dim, "qwen3_5, qwen3_5_moe: each v head's width")
            ->capture_default_str(),
        sub->add_option("--linear-conv-kernel", options.linear_conv_kernel,
                        "qwen3_5, qwen3_5_moe: the causal depthwise conv's kernel over q, k, v (linear_conv_kernel_dim)")
            ->capture_default_str(),
        sub->add_option("--partial-rotary-factor", options.partial_rotary_factor,
                        "qwen3_5, qwen3_5_moe: the share of each full-attention head RoPE rotates")
            ->capture_default_str(),
        sub->add_option("--decoder-sparse-step", options.decoder_sparse_step,
                        "qwen3_moe: experts in every n-th layer, the dense MLP in the others")
            ->capture_default_str(),
        sub->add_option("--mlp-only-layers", options.mlp_only_layers, "qwen3_moe: layers with the dense MLP")
            ->delimiter(','),
        sub->add_option("--sliding-window", options.sliding_window,
                        "gpt_oss: the sliding layers' window in tokens (echo: at least --echo-lag)")
            ->capture_default_str()})
    shape_option->excludes(preset_option);
  static int64_t preset_layers = 0;
  sub->add_option("--preset-layers", preset_layers,
                  "with --preset: only its first N layers, every shape else the real one (a disk that holds less "
                  "than the whole model; per-layer figures stay the real model's)")
      ->needs(preset_option)
      ->check(CLI::PositiveNumber);
  sub->add_flag("--mxfp4", options.mxfp4,
               "gpt_oss: the experts in MXFP4 (*_blocks, *_scales and quantization_config), as the published "
               "checkpoints hold them");
  sub->add_option("--seed", options.seed)->capture_default_str();
  sub->add_option("--pattern", options.pattern,
                  "random: patternless continuations; echo: token[t] = perm(token[t - lag]), learnable by a drafter "
                  "(qwen3, qwen3_moe, gpt_oss)")
      ->check(CLI::IsMember({"random", "echo"}))
      ->capture_default_str()
      ->excludes(preset_option);
  sub->add_option("--echo-lag", options.echo_lag, "echo: how far back the echoed token lies")->capture_default_str();
  auto* dtype_option = sub->add_option("--dtype", dtype, "float32 | bfloat16 (a preset's default: bfloat16)")
                           ->check(CLI::IsMember({"float32", "bfloat16"}));
  auto* shard_option = sub->add_option("--max-shard-mib", max_shard_mib,
                                       "write shards of at most this size plus model.safetensors.index.json "
                                       "(a preset's default: 512; 0: one model.safetensors)");
  static int threads = 1;
  add_threads_option(*sub, threads);
  static std::string device = "cpu";
  sub->add_option("--device", device,
                  "where random weights are drawn: cpu, or cuda (a Qwen3-8B- or 30B-A3B-sized model in seconds)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->callback([&action, dtype_option, shard_option] {
    options.generate_on = device == "cuda" ? torch::Device("cuda:0") : torch::Device(torch::kCPU);
    if (!preset.empty()) {
      const bool mxfp4 = options.mxfp4;  // the one architecture option a preset takes (gpt-oss-20b as published)
      options = target::preset_target_options(preset, options);
      options.mxfp4 = mxfp4;
    }
    if (preset_layers > 0) options.num_layers = std::min(options.num_layers, preset_layers);
    if (preset.empty() || dtype_option->count() > 0) options.dtype = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    if (preset.empty() || shard_option->count() > 0) options.max_shard_bytes = max_shard_mib << 20;
    action = [] {
      torch::set_num_threads(threads);
      auto config = target::make_tiny_target(options);
      std::cout << "wrote " << options.out_dir.string() << ": " << (config.architectures.empty() ? config.model_type : config.architectures.front()) << ", "
                << config.num_hidden_layers << " layers, hidden " << config.hidden_size;
      if (config.moe.num_experts > 0)
        std::cout << ", " << config.moe.num_experts << " experts (top " << config.moe.experts_per_token << ")";
      std::cout << ", vocab " << config.vocab_size << ", " << (options.dtype == torch::kBFloat16 ? "bfloat16" : "float32")
                << (options.max_shard_bytes > 0 ? ", sharded with model.safetensors.index.json" : "") << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
