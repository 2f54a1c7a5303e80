#pragma once
// Parsing and checking one JSONL line {"input_ids": [...], "loss_mask": [...]}
// for dflow prepare. Each way a line can be refused has its own reason, so the
// report can count them and a user can grep for them.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dflow::data {

enum class RejectReason {
  BadJson,           // not parseable JSON
  MissingKey,        // no input_ids or no loss_mask
  WrongType,         // not an object, not arrays, non-integer ids, mask values other than 0/1
  LengthMismatch,    // input_ids and loss_mask differ in length
  Empty,             // zero tokens
  IdOutOfRange,      // an id outside [0, vocab_size) (or negative, or beyond int32)
  TooLong,           // longer than max_length under too_long: skip
  NoResponseTokens,  // no loss_mask 1 (after truncation too): nothing to train on
  UnknownRole,       // conversations: a role (or ShareGPT "from") that is not system/user/assistant/tool
  NoAssistantTurn,   // conversations: no assistant message to learn from
};
inline constexpr size_t kNumRejectReasons = 10;

// "bad_json", "missing_key", ... (stable names for reports and logs).
std::string_view reject_reason_name(RejectReason reason);

enum class TooLongPolicy { Truncate, Skip };
// "truncate" | "skip"; throws DataError naming the valid choices.
TooLongPolicy parse_too_long_policy(std::string_view text);

struct SampleRules {
  int max_length = 512;
  TooLongPolicy too_long = TooLongPolicy::Truncate;
  int64_t vocab_size = 0;  // 0: ids are only checked to be in [0, 2^31)
};

struct Rejection {
  int64_t line_number = 0;  // 1-based line in the input file
  RejectReason reason = RejectReason::BadJson;
  std::string detail;       // what exactly, e.g. "input_ids[3] = 70000 is outside [0, 32000)"
  std::string str() const;  // "line 12: id_out_of_range: input_ids[3] = 70000 ..."
};

struct ParsedSample {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;
  bool truncated = false;
};

// Fills `out` (reusing its buffers) and returns nullopt when the line is
// accepted, or the reason it is not.
std::optional<Rejection> parse_jsonl_sample(std::string_view line, int64_t line_number, const SampleRules& rules,
                                            ParsedSample& out);

}  // namespace dflow::data
