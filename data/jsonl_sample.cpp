#include "data/jsonl_sample.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <nlohmann/json.hpp>

#include "data/data_error.hpp"

namespace dflow::data {
namespace {

using nlohmann::json;

Rejection reject(int64_t line_number, RejectReason reason, std::string detail) {
  return Rejection{line_number, reason, std::move(detail)};
}

// nlohmann prefixes its messages with "[json.exception.parse_error.101] ",
// which says nothing to a user.
std::string without_exception_tag(std::string message) {
  if (!message.empty() && message.front() == '[') {
    const auto end = message.find("] ");
    if (end != std::string::npos) message.erase(0, end + 2);
  }
  // Its line number counts within the JSON text, which is always line 1 here.
  const std::string within_line = "at line 1, column ";
  if (const auto at = message.find(within_line); at != std::string::npos) {
    message.replace(at, within_line.size(), "at column ");
  }
  return message;
}

std::optional<Rejection> read_ids(const json& array, int64_t line_number, const SampleRules& rules,
                                  std::vector<int32_t>& ids) {
  const int64_t id_limit = rules.vocab_size > 0 ? rules.vocab_size : int64_t{std::numeric_limits<int32_t>::max()} + 1;
  ids.clear();
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const json& value = array[i];
    if (!value.is_number_integer()) {
      return reject(line_number, RejectReason::WrongType,
                    fmt::format("input_ids[{}] is {}, expected an integer token id", i, value.dump()));
    }
    const bool negative = value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() < 0;
    if (negative || value.get<uint64_t>() >= static_cast<uint64_t>(id_limit)) {
      const std::string bound = rules.vocab_size > 0 ? fmt::format("{} (vocab_size)", rules.vocab_size)
                                                     : fmt::format("{} (int32 range)", id_limit);
      return reject(line_number, RejectReason::IdOutOfRange,
                    fmt::format("input_ids[{}] = {} is outside [0, {}); was it tokenized with another tokenizer?", i,
                                value.dump(), bound));
    }
    ids.push_back(static_cast<int32_t>(value.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<Rejection> read_mask(const json& array, int64_t line_number, std::vector<uint8_t>& mask) {
  mask.clear();
  mask.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const json& value = array[i];
    if (value.is_boolean()) {
      mask.push_back(value.get<bool>() ? 1 : 0);
    } else if (value.is_number_integer() && (value == 0 || value == 1)) {
      mask.push_back(static_cast<uint8_t>(value.get<int>()));
    } else {
      return reject(line_number, RejectReason::WrongType,
                    fmt::format("loss_mask[{}] is {}, expected 0 or 1", i, value.dump()));
    }
  }
  return std::nullopt;
}

std::optional<Rejection> find_arrays(const json& document, int64_t line_number, const json*& ids, const json*& mask) {
  if (!document.is_object()) {
    return reject(line_number, RejectReason::WrongType,
                  fmt::format("the line is a JSON {}, expected an object with input_ids and loss_mask",
                              document.type_name()));
  }
  for (const char* key : {"input_ids", "loss_mask"}) {
    const auto found = document.find(key);
    if (found == document.end()) {
      return reject(line_number, RejectReason::MissingKey, fmt::format("missing key '{}'", key));
    }
    if (!found->is_array()) {
      return reject(line_number, RejectReason::WrongType,
                    fmt::format("'{}' is a {}, expected an array", key, found->type_name()));
    }
    (std::string_view(key) == "input_ids" ? ids : mask) = &*found;
  }
  return std::nullopt;
}

}  // namespace

std::string_view reject_reason_name(RejectReason reason) {
  switch (reason) {
    case RejectReason::BadJson: return "bad_json";
    case RejectReason::MissingKey: return "missing_key";
    case RejectReason::WrongType: return "wrong_type";
    case RejectReason::LengthMismatch: return "length_mismatch";
    case RejectReason::Empty: return "empty";
    case RejectReason::IdOutOfRange: return "id_out_of_range";
    case RejectReason::TooLong: return "too_long";
    case RejectReason::NoResponseTokens: return "no_response_tokens";
    case RejectReason::UnknownRole: return "unknown_role";
    case RejectReason::NoAssistantTurn: return "no_assistant_turn";
  }
  return "unknown";
}

TooLongPolicy parse_too_long_policy(std::string_view text) {
  if (text == "truncate") return TooLongPolicy::Truncate;
  if (text == "skip") return TooLongPolicy::Skip;
  throw DataError(fmt::format("too_long policy '{}' is not known; use 'truncate' or 'skip'", text));
}

std::string Rejection::str() const {
  return fmt::format("line {}: {}: {}", line_number, reject_reason_name(reason), detail);
}

std::optional<Rejection> parse_jsonl_sample(std::string_view line, int64_t line_number, const SampleRules& rules,
                                            ParsedSample& out) {
  json document;
  try {
    document = json::parse(line);
  } catch (const json::exception& error) {
    // parse_error, and out_of_range 406 for a number too large for a double (1E400)
    return reject(line_number, RejectReason::BadJson, without_exception_tag(error.what()));
  }
  const json* ids = nullptr;
  const json* mask = nullptr;
  if (auto rejection = find_arrays(document, line_number, ids, mask)) return rejection;
  if (auto rejection = read_ids(*ids, line_number, rules, out.input_ids)) return rejection;
  if (auto rejection = read_mask(*mask, line_number, out.loss_mask)) return rejection;
  if (out.input_ids.size() != out.loss_mask.size()) {
    return reject(line_number, RejectReason::LengthMismatch,
                  fmt::format("input_ids has {} tokens but loss_mask has {}", out.input_ids.size(),
                              out.loss_mask.size()));
  }
  if (out.input_ids.empty()) return reject(line_number, RejectReason::Empty, "input_ids and loss_mask are empty");
  const size_t length = out.input_ids.size();
  const auto max_length = static_cast<size_t>(rules.max_length);
  out.truncated = false;
  if (length > max_length) {
    if (rules.too_long == TooLongPolicy::Skip) {
      return reject(line_number, RejectReason::TooLong,
                    fmt::format("{} tokens, longer than max_length {} (too_long: skip)", length, max_length));
    }
    out.input_ids.resize(max_length);
    out.loss_mask.resize(max_length);
    out.truncated = true;
  }
  if (std::find(out.loss_mask.begin(), out.loss_mask.end(), uint8_t{1}) == out.loss_mask.end()) {
    return reject(line_number, RejectReason::NoResponseTokens,
                  out.truncated ? fmt::format("no loss_mask 1 within the first {} tokens (after truncation); the "
                                              "response starts beyond max_length",
                                              max_length)
                                : std::string("no loss_mask 1: the sample has no response tokens to train on"));
  }
  return std::nullopt;
}

}  // namespace dflow::data
