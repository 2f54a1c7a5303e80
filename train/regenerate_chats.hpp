#pragma once
// DFlash data from a user's conversations: each conversation's prompt (up to
// its last user turn, rendered with the generation prompt) is answered by the
// target itself, and written as training JSONL {"line", "input_ids",
// "loss_mask"} (mask 1 on the answer). Lines are appended and flushed one by
// one; a rerun with the same output continues after the last complete line,
// so a crash after hours of generation loses nothing already written; with
// --features the rerun first computes the records the crash left out. A
// rerun refuses an --out that holds lines it did not write.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "target/target.hpp"
#include "text/tokenizer.hpp"
#include "train/regenerate_features.hpp"

namespace dflow::train {

struct ChatRegenerateOptions {
  std::filesystem::path chats;       // JSONL conversations (messages or ShareGPT)
  std::filesystem::path out;         // training JSONL, appended to on a rerun
  std::string chat_template = "qwen3";
  bool enable_thinking = false;      // qwen3: false (the DFlash recipe) puts an empty think block in the prompt
  std::string current_date;          // harmony's "Current date" (YYYY-MM-DD); "": today's
  int64_t max_new_tokens = 512;
  double temperature = 0.0;          // <= 0: greedy
  uint64_t seed = 0;                 // sampling: hash(seed, input line)
  std::ostream* progress = nullptr;  // a progress line with ETA after each conversation
  // With a directory: each line written gets its features in the cache there,
  // sample id = the line's 0-based index in `out` (a rerun's lines continue
  // the numbering, as they continue the file).
  FeatureCaptureOptions features;
};

struct ChatRegenerateReport {
  int64_t conversations = 0;    // non-blank input lines
  int64_t already_done = 0;     // lines a previous run had written
  int64_t written = 0;          // by this run
  std::vector<std::string> rejected;  // "line N: reason", one per line not answered
  // --features: of the already_done lines, those whose record the cache
  // lacked (an earlier run without --features, or killed before publishing),
  // computed now, and those it holds for other tokens (reported, not
  // refused: the lines are good data, but that cache cannot train on them).
  int64_t features_recomputed = 0;
  int64_t features_mismatched = 0;
  int64_t features_written = 0;  // lines of this run with their record (appended, or already there)
};

ChatRegenerateReport regenerate_chats(const target::TargetModel& target, const text::Tokenizer& tokenizer,
                                      const ChatRegenerateOptions& options);

}  // namespace dflow::train
