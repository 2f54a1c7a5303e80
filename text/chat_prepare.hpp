#pragma once
// dflow prepare from conversations: each JSONL line ({"messages": ...} or
// ShareGPT {"conversations": ...}) rendered with a chat template, tokenized
// with the target's tokenizer and masked, then written as shards that record
// the tokenizer's fingerprint. Every refused line is reported with its number
// and reason, as for token-id input.
#include <filesystem>
#include <string>

#include "data/prepare.hpp"

namespace dflow::text {

struct ChatPrepareOptions {
  std::filesystem::path input_path;
  std::filesystem::path out_dir;
  std::filesystem::path tokenizer;      // target directory or its tokenizer.json
  std::string chat_template = "qwen3";
  int max_length = 512;
  data::TooLongPolicy too_long = data::TooLongPolicy::Truncate;
  bool last_turn_only = false;
  int64_t samples_per_shard = 65536;
  bool overwrite = false;
  std::string current_date;             // harmony's "Current date" (YYYY-MM-DD); "": today's
  std::filesystem::path out_jsonl;      // non-empty: also write {"input_ids", "loss_mask"} per accepted line
};

// Throws ConfigError for an unknown template or a refused tokenizer, and
// data::DataError when the input cannot be read or no line is accepted.
data::PrepareReport prepare_chats(const ChatPrepareOptions& options);

}  // namespace dflow::text
